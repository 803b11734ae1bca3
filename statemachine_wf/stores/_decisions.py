"""The decisions written once for both stores: the CAS commits, quarantine, DAG create
and claim (see :mod:`._base` for how a dialect supplies its SQL).

A CAS commit is a list of named query pieces: the first statement of the first piece is
the version check on ``wf_instances.version`` and the last returns the new version, so
nothing of a decision is written unless the version it was made on is still current.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, assert_never

from ..decide import Continue, Decision, Finish, KeepTask, Park, Reschedule
from ..errors import ConcurrencyConflict
from ..store import Claim, Commit, DagCommit, NewDagInstance
from ._base import Row, SqlBase
from ._common import (
    Undecodable,
    dag_apply_params,
    dag_wakes,
    event_dicts,
    instance_record,
    new_event_dicts,
    new_lease_token,
    projection_params,
    signal_write_params,
    task_record,
    undecodable,
)


class SqlStore(SqlBase):
    """A SQL :class:`~statemachine_wf.store.Store` over a dialect's primitives."""

    # -- Decisions: the CAS commits --------------------------------------------------------
    def _apply_plan(
        self,
        instance_id: str,
        version: int,
        decision: Decision,
        worker: str | None,
        lease: float,
    ) -> tuple[list[str], dict[str, Any]]:
        """The pieces of an ``apply`` (see ``_run_decision``) and their parameters."""
        params = self._params(
            **projection_params(decision.state, self._encode),
            **signal_write_params(decision, self._encode),
            id=instance_id,
            version=version,
            worker=worker,
            lease=lease,
            events=self._encode(event_dicts(decision)),
        )
        names = ["apply_head"]
        if decision.dead_letter is not None:
            names.append("apply_dead_letter")
            params["dead_letter"] = decision.dead_letter
        if decision.signals:
            names.append("apply_signals")
        op = decision.task
        if isinstance(op, Continue):
            names.append("apply_continue")
            params.update(node=op.node, attempt=op.attempt, failures=op.failures)
        elif isinstance(op, Reschedule):
            names.append("apply_reschedule")
            params.update(
                node=op.node,
                delay=op.delay,
                failures=op.failures,
                attempt=decision.state.attempts.get(op.node, 0),
                in_doubt=op.in_doubt,
            )
        elif isinstance(op, Park):
            names.append("apply_park")
            params.update(node=op.node, failures=op.failures)
        elif isinstance(op, Finish):
            names.append("apply_finish")
        elif isinstance(op, KeepTask):
            names.append("apply_keep")
        else:
            assert_never(op)
        return names, params

    def _write_decision(
        self,
        conn: Any,
        instance_id: str,
        version: int,
        decision: Decision,
        worker: str | None,
        lease: float,
    ) -> Row | None:
        """Write ``decision`` on ``conn`` under the CAS on ``version``; the row with the new
        ``version``, or None when the CAS failed (nothing written). SQLite's claim calls it
        too (its fast start), inside the claim's transaction."""
        names, params = self._apply_plan(instance_id, version, decision, worker, lease)
        return self._run_decision(conn, names, params)

    def apply(self, commit: Commit) -> int:
        try:
            with self._statement() as conn:
                row = self._write_decision(
                    conn,
                    commit.instance_id,
                    commit.version,
                    commit.decision,
                    commit.worker,
                    commit.lease,
                )
        except ConcurrencyConflict:
            # The unique index refused a duplicate once-per-attempt event: somebody else
            # already wrote this decision. Nothing was written; as a lost CAS.
            raise ConcurrencyConflict(commit.instance_id, commit.version) from None
        if row is None:  # the CAS: the version moved since the decision was made
            current = self.get(commit.instance_id)
            raise ConcurrencyConflict(
                commit.instance_id, commit.version, None if current is None else current.version
            )
        # A parked or rescheduled task, or a finish (its lock waiters, its parent) may be
        # due now for another runner of this process (PostgreSQL's SQL notifies itself).
        if isinstance(commit.decision.task, Park | Reschedule | Finish):
            self._made_due()
        return int(row["version"])

    def dag_apply(self, commit: DagCommit) -> int:
        params = self._params(**dag_apply_params(commit, self._encode))
        try:
            with self._statement() as conn:
                row = self._run_decision(conn, ["dag_apply"], params)
        except ConcurrencyConflict:  # a node task already open, or an event: a lost race
            raise ConcurrencyConflict(commit.instance_id, commit.version) from None
        if row is None:  # the executor re-reads anyway: no round trip for the current version
            raise ConcurrencyConflict(commit.instance_id, commit.version)
        if dag_wakes(commit.decision):
            self._made_due()
        return int(row["version"])

    # -- Quarantine ---------------------------------------------------------------------
    def _quarantine_params(self, instance_id: str, reason: str, worker: str) -> dict[str, Any]:
        # The code "quarantined" is what tells a quarantine from a failure: claim_instance
        # leaves a quarantined instance alone until its parked task falls due or a redrive.
        error = {"step": None, "code": "quarantined", "message": reason, "recoverable": True}
        return self._params(id=instance_id, error=self._encode(error), reason=reason, worker=worker)

    def quarantine(self, instance_id: str, *, reason: str, worker: str) -> None:
        # One commit: STALLED with the error (the version bumped, so a decision made on
        # the row before loses its CAS), the task held back a day, a QUARANTINED event and
        # a dead letter whose envelope is the row.
        with self._statement() as conn:
            self._run(conn, "quarantine", self._quarantine_params(instance_id, reason, worker))

    # -- DagRuns: create and claim ---------------------------------------------------
    def dag_create(self, new: NewDagInstance) -> tuple[str, bool]:
        # One commit, as create: the instance, its run row, its events and its first node
        # task, unless the idempotency key is known.
        row = self._write_one(
            "dag_create",
            id=new.id,
            type=new.type,
            input=self._encode(new.input),
            key=new.idempotency_key,
            priority=new.priority,
            parent_id=new.parent_id,
            name=new.name,
            version=new.version,
            test=new.test,
            events=self._encode(new_event_dicts(new.events)),
            start=new.start,
            delay=new.delay,
        )
        return self._created(row, new.idempotency_key) or self.dag_create(new)

    def _claimed_instance(self, conn: Any, row: Row) -> Any:
        """The instance row of a claimed task, on the claim's connection: PostgreSQL's
        statement returns it (``to_jsonb``, an :class:`Undecodable` if it would not
        decode); SQLite reads it inside the claim's transaction (as columns: SQLite's JSON
        would round its times to 15 digits)."""
        return row["instance"]

    def dag_claim(
        self,
        *,
        worker: str,
        types: Sequence[str],
        lease: float,
        limit: int = 1,
        incarnation: str = "",
    ) -> list[Claim]:
        # One commit: the leases (under one fresh token: see new_lease_token) and each
        # node's NODE_STARTED, the intent a crashed runner leaves behind.
        params = self._params(
            types=self._array(types),
            worker=worker,
            lease=lease,
            limit=limit,
            token=new_lease_token(incarnation),
        )
        with self._statement() as conn:
            rows = list(self._run(conn, "dag_claim", params).fetchall())
            claimed = [(r, self._claimed_instance(conn, r)) for r in rows]
        claims = []
        for r, raw in claimed:
            problem = (
                f"stored instance: {raw.reason}"
                if isinstance(raw, Undecodable)
                else undecodable(instance_record(raw))
            )
            if problem is not None:  # leased and started: set aside until redriven
                self.quarantine(
                    str(r["instance_id"]), reason=f"corrupt row: {problem}", worker=worker
                )
                continue
            claims.append(
                Claim(task_record(r), instance_record(raw), started=True, more=bool(r["more"]))
            )
        return claims
