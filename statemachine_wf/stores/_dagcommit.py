"""DAG commits, written once for both stores: a decision of one node's completion, or of
several committed together (a group: ``DagDecision.also_done``), with the node task taken
for the committing worker or workers (see :mod:`._decisions` for the CAS commits' shape).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Literal

from ..core.dag_interpret import handed_task, takes_sibling
from ..core.store import DagApplied, DagCommit
from ..errors import ConcurrencyConflict, StoreError
from ._base import Row
from ._common import dag_apply_params, dag_wakes, dumps, new_lease_token, task_record
from ._overview import SqlReads


class DagCommits(SqlReads):
    """``dag_apply`` and ``dag_commit`` over a dialect's primitives."""

    dag_sticky: float = 0.0
    """Seconds a DAG node task a commit dispatches is its runner's alone (0: anyone's)."""

    dag_group_most: int = 1
    """The most node completions of one instance a ``dag_commit`` carries, and siblings it
    takes (1: no groups; ``DagRuns.dag_group_most``)."""

    def _lone_commit(self) -> AbstractContextManager[Any]:
        """A connection for a commit that shares no statement with another: a DAG node's.
        PostgreSQL's never waits for the connections the grouped commits queue for."""
        return self._statement()

    def _dag_plan(self, commit: DagCommit, params: dict[str, Any]) -> list[str]:
        """The pieces of a ``dag_apply``: its own CAS and tail around the shared ones."""
        dead = ["apply_dead_letter"] if commit.decision.dead_letter is not None else []
        head = "dag_head_relaxed" if commit.blockers else "dag_head"
        return [head, "append_events", *dead, *self._dag_tail(commit, params)]

    def _dag_tail(self, commit: DagCommit, params: dict[str, Any]) -> list[str]:
        """The tail's pieces: SQLite's is one script, its statements guarded."""
        return ["dag_tail"]

    def dag_unkeep(self, instance_id: str, *, worker: str, keep: int) -> int:
        if self.dag_sticky <= 0 or not self._may_exist(instance_id):
            return 0  # nothing is ever kept (SQLite)
        row = self._write_one("dag_unkeep", id=instance_id, worker=worker, keep=max(0, keep))
        return 0 if row is None else int(row["freed"])

    def dag_apply(self, commit: DagCommit) -> int:
        return self.dag_commit(commit).version

    def dag_commit(
        self,
        commit: DagCommit,
        *,
        take: Literal["handed", "sibling"] | None = None,
        lease: float = 0.0,
        incarnation: str = "",
        siblings: int = 1,
        keep: int | None = None,
    ) -> DagApplied:
        group = 1 + len(commit.decision.also_done)  # completions committed together
        # Siblings: one for each worker of a group, or a run of branches for one worker
        # (runtime/dag_batch.py); at most what a group may carry.
        most = self.dag_group_most if take == "sibling" else 1
        if group > self.dag_group_most or not 1 <= siblings <= most:
            raise ValueError(
                f"{self.dialect}: DAG commit of {commit.instance_id}: {group} completions "
                f"(at most {self.dag_group_most}), {siblings} siblings taken"
            )
        params = dag_apply_params(commit, self._encode)
        # A completion its blockers vouch for commits on a later version too (the store
        # checks, under the instance's row lock, its own task and one of those still open).
        params["blockers"] = self._array(commit.blockers)
        # The first `keep` dispatched tasks (None: all) are this runner's for a while.
        params.update(sticky=self.dag_sticky, keep=keep)
        if take == "handed":
            # The dispatched task is inserted leased (the claim's columns, its attempt
            # counted) and the decision carries its NODE_STARTED: what dag_claim would have
            # written, in the commit that dispatched it, for the worker free to run it now.
            if handed_task(commit.decision) is None:
                raise ValueError(
                    "dag_commit(take='handed') hands off exactly one node task due now"
                )
            params.update(token=new_lease_token(incarnation), lease=lease)
        elif take == "sibling":
            # Another node task of the instance, due now, leased in the commit as dag_claim
            # leases it (its NODE_STARTED written by the store): under the instance's row
            # lock, which dag_claim skips, so no claim takes it meanwhile.
            if not takes_sibling(commit.decision):
                raise ValueError(
                    "dag_commit(take='sibling') takes a node task in a commit that neither "
                    "ends the instance, sets its status, retries a node nor hands one over"
                )
            # A token for each worker of a group (one, outside a group).
            tokens = [new_lease_token(incarnation) for _ in range(siblings)]
            params.update(
                sib_token=tokens[0], sib_tokens=dumps(tokens), sib_n=siblings, lease=lease
            )
        row = self._dag_apply(commit, params)
        taken = None if row["taken"] is None else self._json(row["taken"])
        # The seqs come back in insertion order, which is the decision's (append_events
        # inserts its rows in order); sorted in case a driver's aggregate is not.
        seqs = tuple(sorted(int(s) for s in self._json(row["seqs"]) or ()))
        if len(seqs) != len(commit.decision.events):
            raise StoreError(
                f"{self.dialect}: DAG commit of {commit.instance_id}: "
                f"{len(commit.decision.events)} events, {len(seqs)} seqs returned"
            )
        task = None if taken is None else task_record({**taken, "leased": True})
        more = self._json(row["more_taken"]) if siblings > 1 else None
        more_tasks = tuple(task_record({**r, "leased": True}) for r in more) if more else ()
        return DagApplied(int(row["version"]), seqs, task, more_tasks)

    def _dag_apply(self, commit: DagCommit, params: dict[str, Any]) -> Row:
        params["n_events"] = len(commit.decision.events)
        try:
            plan = self._dag_plan(commit, params)
            with self._lone_commit() as conn:
                row = self._run_decision(conn, plan, self._params(**params))
        except ConcurrencyConflict:  # a node task already open, or an event: a lost race
            raise ConcurrencyConflict(commit.instance_id, commit.version) from None
        if row is None:  # the executor re-reads anyway: no round trip for the current version
            raise ConcurrencyConflict(commit.instance_id, commit.version)
        if dag_wakes(commit.decision):
            self._made_due()
        return row
