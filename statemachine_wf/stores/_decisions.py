"""The decisions written once for both stores: the CAS commits, quarantine, the claims,
DAG create and claim (see :mod:`._base` for how a dialect supplies its SQL).

A CAS commit is a list of named query pieces: the first statement of the first piece is
the version check on ``wf_instances.version`` and the last returns the new version, so
nothing of a decision is written unless the version it was made on is still current.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any, ClassVar, assert_never

from ..core.decide import Continue, Finish, KeepTask, Park, Reschedule
from ..core.store import Claim, Claimant, Commit, NewDagInstance, NewInstance
from ..errors import ConcurrencyConflict, StoreError
from ._base import Row
from ._common import (
    Undecodable,
    event_dicts,
    instance_record,
    new_event_dicts,
    new_lease_token,
    projection_params,
    signal_record,
    signal_write_params,
    task_record,
    undecodable,
)
from ._dagcommit import DagCommits

# How long a process's starts go unoffered after an offer found no runner of another
# process asleep: the runners are busy, and their next sleep is not far off.
UNOFFERED = 0.1


class SqlStore(DagCommits):
    """A SQL :class:`~statemachine_wf.core.store.Store` over a dialect's primitives."""

    one_writer: ClassVar[bool] = True
    """Whether the process's writes queue on one writer lock (SQLite), so that what a
    write does while holding it is everybody's wait. Then ``apply_and_claim`` runs the
    claim in the decision's transaction (one write, one commit, where there were two), and
    ``claim`` first reads whether anything is due, taking no write for an empty claim.
    PostgreSQL (False) runs the two statements apart and claims without the read."""

    offers_starts = False
    """Whether a start due now that no worker of its process takes may lease its task to
    a runner of another process with a worker asleep (PostgreSQL, once migrated to 023:
    ``create_offered``)."""
    # Monotonic: until then a start goes as `create`, the last offer having found no
    # runner asleep (an offer no runner takes costs the start 30% more of the server's
    # CPU: bench/README.md, "Session 45").
    _unoffered_until = 0.0
    _starts = 0  # made through this store object (starts_made)

    def starts_made(self) -> int:
        return self._starts

    def retire(self, claimant: Claimant) -> None:
        """A runner stops (``Store.retire``): nothing here leases starts across
        processes."""

    # -- Decisions: the CAS commits --------------------------------------------------------
    def _apply_plan(self, commit: Commit) -> tuple[list[str], dict[str, Any]]:
        """The pieces of an ``apply`` (see ``_run_decision``) and their parameters."""
        decision = commit.decision
        params = self._params(
            **projection_params(decision.state, self._encode),
            **signal_write_params(decision, self._encode),
            id=commit.instance_id,
            version=commit.version,
            worker=commit.worker,
            lease=commit.lease,
            # SQLite's status statement runs only when the commit does not know the status
            # it was made on (Commit.status); when it does, the status is kept, or moved by
            # the head (_head).
            status_unknown=commit.status is None,
            events=self._encode(event_dicts(decision)),
        )
        moves = commit.status is not None and commit.status != decision.state.status
        names = [self._head(moves), "append_events"]
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
                tell=op.tell,
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

    def _head(self, moves: bool) -> str:
        """The CAS's query of a decision: ``apply_head``, which sets the status too
        (SQLite: apart, when the commit does not know it moves; ``moves``, it does)."""
        return "apply_head"

    def apply(self, commit: Commit) -> int:
        return self._apply(commit, None)[0]

    def apply_and_claim(
        self,
        commit: Commit,
        *,
        types: Sequence[str],
        lease: float,
        incarnation: str = "",
    ) -> tuple[int, list[Claim]]:
        # The claim runs after the decision and sees it: it never takes the task the
        # finish just deleted, and a lock the finish released is free to it. A lost CAS
        # raises before anything is claimed.
        worker = commit.worker
        if worker is None:
            raise ValueError("apply_and_claim: the commit names no worker to claim for")

        def params() -> dict[str, Any]:
            return self._claim_params(types, worker, lease, 1, incarnation)

        if not self.one_writer:
            # The claim is under way from the decision on: a start's notification that
            # arrives meanwhile is covered by this claim (Wakeup.notify).
            with self._wakeup.claiming(types) as sent:
                claimed = None
                if isinstance(commit.decision.task, Finish):
                    # One statement: the finish's CTEs, then the claim's (see
                    # _finish_then_claim).
                    sent()
                    version, claimed = self._finish_claiming(commit, types, lease, incarnation)
                else:
                    version = self.apply(commit)
                if claimed is not None:
                    return version, self._claims(claimed, worker, lease, incarnation)
                # Not a finish, or a finish that made a task due (a lock waiter, a
                # parent), which its statement's snapshot does not hold: the claim is a
                # statement of its own, and sees it.
                return version, self.claim(
                    worker=worker, types=types, lease=lease, incarnation=incarnation
                )
        # One writer: one transaction, so one write and one commit where there were two; a
        # lost CAS rolls both back, and no claim is left leased to a worker that raises.
        # The claim's parameters are made after the decision's: its `now` (SQLite's clock)
        # must not be earlier than the due time the finish gave a lock waiter it woke.
        version, claimed = self._apply(commit, params)
        return version, self._claims(claimed or [], worker, lease, incarnation)

    def _finish_claiming(
        self, commit: Commit, types: Sequence[str], lease: float, incarnation: str
    ) -> tuple[int, list[tuple[Row, Any, Any]] | None]:
        """The finish ``commit`` and a claim for its worker, as one statement (PostgreSQL,
        which also sends several workers' at once: ``PostgresStore``); the claim's rows,
        or None when the finish made a task due and nothing was claimed."""
        worker = str(commit.worker)
        return self._apply(commit, lambda: self._claim_params(types, worker, lease, 1, incarnation))

    def _apply(
        self, commit: Commit, claim: Callable[[], dict[str, Any]] | None
    ) -> tuple[int, list[tuple[Row, Any, Any]] | None]:
        """Write ``commit``; then, in the same transaction, claim with ``claim()``'s
        parameters (the claim's rows; None: PostgreSQL's finish made a task due, and its
        statement claimed nothing)."""
        claimed: list[tuple[Row, Any, Any]] | None = []
        # The parameters (the JSON encoding) before the connection: SQLite's writes queue
        # on one writer lock, and all the work done while holding it is everybody's wait.
        names, params = self._apply_plan(commit)
        # PostgreSQL's claim after a finish is part of the finish's statement.
        fused = None if claim is None or self.one_writer else claim
        try:
            with self._statement() if claim is None or fused else self._transaction() as conn:
                if fused is not None:
                    row, claimed = self._finish_then_claim(conn, names, {**params, **fused()})
                else:
                    row = self._run_decision(conn, names, params)
                    if row is not None and claim is not None:
                        claimed = self._claim_rows(conn, claim())
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
        # Not after a fused claim: it ran after the finish and saw what it made due, and
        # its `more` passes the baton when anything is left (a wake-up here mostly woke a
        # worker to an empty claim: `python -m bench statements --e2e`).
        # Nor for a task handed back by a worker that claims next itself (Reschedule.tell).
        task = commit.decision.task
        quiet = isinstance(task, Reschedule) and not task.tell
        if isinstance(task, Park | Reschedule | Finish) and claim is None and not quiet:
            self._made_due()
        return int(row["version"]), claimed

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

    # -- TaskQueue: the claims -----------------------------------------------------------
    def _claimed_instance(self, conn: Any, row: Row) -> Any:
        """The instance row of a claimed task, on the claim's connection: PostgreSQL's
        statement returns it (``to_jsonb``, an :class:`Undecodable` if it would not
        decode; None when an operator changed it between the statement's read and its
        write); SQLite reads it inside the claim's transaction (as columns: SQLite's JSON
        would round its times to 15 digits)."""
        return row["instance"]

    def _claimed_signals(self, conn: Any, row: Row, instance: Any) -> Any:
        """The due pending signals of a claimed waiting instance that did not start, read
        with the claim so a resume takes one round trip less (None: the runner reads
        them), or the timer the claim fired and applied. PostgreSQL's statement returns
        them; SQLite reads them in the claim's transaction."""
        return row["signals"]

    def next_due(
        self,
        *,
        types: Sequence[str],
        dag_types: Sequence[str] | None = None,
        worker: str = "",
    ) -> float | None:
        query = "next_due" if dag_types is None else "next_due_kinds"
        dag = self._array(dag_types or ())
        row = self._read_one(query, types=self._array(types), dag=dag, worker=worker)
        if row is None or row["wait"] is None:
            return None
        return max(0.0, float(row["wait"]))

    def _claim_params(
        self, types: Sequence[str], worker: str, lease: float, limit: int, incarnation: str
    ) -> dict[str, Any]:
        """A claim's parameters; its lease token is fresh (see new_lease_token)."""
        return self._params(
            types=self._array(types),
            worker=worker,
            lease=lease,
            limit=limit,
            token=new_lease_token(incarnation),
        )

    def claim(
        self,
        *,
        worker: str,
        types: Sequence[str],
        lease: float,
        limit: int = 1,
        incarnation: str = "",
    ) -> list[Claim]:
        # One commit: the due tasks leased under one fresh token (see new_lease_token),
        # every claimed instance's version bumped (an earlier holder whose lease expired
        # loses its next CAS instead of writing over ours), and where the step may start
        # at once its next attempt's intent, STEP_STARTED: what a crashed runner leaves.
        if self.one_writer and self.next_due(types=types) != 0.0:
            # Nothing due (the earliest task of these types is later, or there is none):
            # no write. A worker woken for a task that another took (a fused claim, a
            # baton) found this empty in a write of its own, one per workflow and more.
            return []
        params = self._claim_params(types, worker, lease, limit, incarnation)
        with self._wakeup.claiming(types) as sent, self._statement() as conn:
            sent()  # from here on, what is notified is for the next claim
            claimed = self._claim_rows(conn, params)
        return self._claims(claimed, worker, lease, incarnation)

    def _claim_rows(self, conn: Any, params: dict[str, Any]) -> list[tuple[Row, Any, Any]]:
        """Run the claim on ``conn``: each leased task's row, its instance and signals."""
        return self._claimed_rows(conn, self._run(conn, "claim", params).fetchall())

    def _claimed_rows(self, conn: Any, rows: Sequence[Row]) -> list[tuple[Row, Any, Any]]:
        """Each leased task's row of a claim's ``rows``, its instance and signals (a row
        whose task is NULL leased nothing: PostgreSQL's claim returns one when empty)."""
        claimed = []
        for row in rows:
            if row["id"] is not None:
                raw = self._claimed_instance(conn, row)
                claimed.append((row, raw, self._claimed_signals(conn, row, raw)))
        return claimed

    def _finish_then_claim(
        self, conn: Any, names: Sequence[str], params: dict[str, Any]
    ) -> tuple[Row | None, list[tuple[Row, Any, Any]] | None]:
        """A finish and the claim after it as one statement (PostgreSQL): the finish's
        row (None: its CAS was lost, and nothing was claimed) and the claim's rows (None:
        the finish made a task due, and nothing was claimed)."""
        raise NotImplementedError

    def _claims(
        self, claimed: list[tuple[Row, Any, Any]], worker: str, lease: float, incarnation: str
    ) -> list[Claim]:
        """The claims of ``_claim_rows``, read after its commit."""
        claims = []
        for row, raw, raw_signals in claimed:
            try:
                task = task_record(row)
                if raw is None:  # changed under the statement: we hold the task, look afresh
                    claims.append(self._claim_afresh(task, worker, lease, incarnation))
                    continue
                instance = self._checked(raw)
                signals = (
                    None  # one payload too deep: the runner reads them one by one
                    if raw_signals is None or isinstance(raw_signals, Undecodable)
                    else tuple(signal_record(r, decoded=self.json_decoded) for r in raw_signals)
                )
                claims.append(
                    Claim(
                        task,
                        instance,
                        started=bool(row["started"]),
                        signals=signals,
                        more=bool(row["more"]),
                    )
                )
            except (ValueError, KeyError, TypeError) as exc:
                # A row no decision can be made on: leased (so nobody else spins on it),
                # then set aside with a dead letter until an operator redrives it.
                self.quarantine(
                    str(row["instance_id"]), reason=f"corrupt row: {exc}", worker=worker
                )
        return claims

    @staticmethod
    def _checked(raw: Any) -> Any:
        """The :class:`InstanceRecord` of a claimed row; ValueError if it cannot be read."""
        if isinstance(raw, Undecodable):
            raise ValueError(f"stored instance: {raw.reason}")
        instance = instance_record(raw)
        problem = undecodable(instance)
        if problem is not None:
            raise ValueError(problem)
        return instance

    def _lease_afresh(
        self, conn: Any, task_id: int, instance_id: str, worker: str, lease: float, inc: str
    ) -> tuple[Row, Row]:
        """Bump the instance's version and lease its task, in the caller's transaction;
        the two rows as they are now. Nothing starts: the runner decides from the log."""
        inst = self._run(conn, "bump_version", self._params(id=instance_id)).fetchone()
        leased = self._run(
            conn,
            "lease_task",
            self._params(task_id=task_id, worker=worker, lease=lease, token=new_lease_token(inc)),
        ).fetchone()
        if inst is None or leased is None:  # raised inside the transaction: rolled back
            raise StoreError(f"{self.dialect}: claim of {instance_id}: its rows are gone")
        return inst, leased

    def _claim_afresh(self, task: Any, worker: str, lease: float, inc: str) -> Claim:
        with self._transaction() as conn:
            inst, leased = self._lease_afresh(conn, task.id, task.instance_id, worker, lease, inc)
        return Claim(task_record(leased), instance_record(inst), started=False)

    def claim_instance(
        self, instance_id: str, *, worker: str, lease: float, incarnation: str = ""
    ) -> Claim | None:
        # The start-up pass's claim of one instance it knows about (see the query for
        # which tasks it may take); never starts anything.
        if not self._may_exist(instance_id):
            return None
        with self._transaction() as conn:
            locked = self._run(conn, "claim_instance_lock", self._params(id=instance_id)).fetchone()
            if locked is None:
                return None
            inst, leased = self._lease_afresh(
                conn, locked["id"], instance_id, worker, lease, incarnation
            )
        try:
            return Claim(task_record(leased), self._checked(inst), started=False)
        except (ValueError, KeyError, TypeError) as exc:
            self.quarantine(instance_id, reason=f"corrupt row: {exc}", worker=worker)
            return None

    # -- Starts: a state machine's, a DAG's ---------------------------------------------
    def create(self, new: NewInstance) -> tuple[str, bool]:
        # One commit: the instance, its WORKFLOW_CREATED event and its task, unless the
        # idempotency key is known (then nothing is written and the existing id returned).
        due_now = new.delay <= 0 and new.run_at is None
        row = self._start("create", new.type, due_now, **self._create_params(new))
        return self._created(row, new.idempotency_key) or self.create(new)

    def _start(self, name: str, type_: str, due_now: bool, /, **params: Any) -> Row | None:
        """A start's statement (``create``, ``dag_create``): its row, None when its key was
        taken.

        Due now, and a worker of this process that claims its type sleeps: the start is
        handed to that worker, and no other process is told. With a runner in every
        process, each process's idle worker would otherwise claim on the start's commit,
        one to take the task and the others to find nothing. A state machine's start
        leases its task to that worker and starts its first step in the same commit
        (``create_leased``) unless a claim of the type is under way here: the worker runs
        it with no claim of its own (docs/architecture.md, "A start kept in its
        process"). ``notify``: whether PostgreSQL's statement tells the other processes
        (SQLite's watchers hear every commit; its statements ignore it)."""
        self._starts += 1
        if not due_now:
            row = self._write_one(name, **params, notify=True)
            if row is not None:
                self._made_due()  # a sooner due time for the worker that sleeps until one
            return row
        taken = self._wakeup.promise(type_)
        if taken is None:
            # No worker of the type asleep here: told unless a claim here covers it
            # (docs/architecture.md, "A start held in its process").
            with self._wakeup.starting(type_) as made:
                offer = made is None and name == "create" and self.offers_starts
                if offer and time.monotonic() >= self._unoffered_until:
                    name = "create_offered"  # to a runner of another process asleep
                row = self._write_one(name, **params, notify=made is None)
                if name == "create_offered" and row is not None and row["offered"] is None:
                    self._unoffered_until = time.monotonic() + UNOFFERED
                if row is not None:
                    if made is None:
                        self._made_due()
                    else:
                        made()
            return row
        sleeper, claimant = taken
        row, claim = None, None
        try:
            if name == "create" and params["step"] and claimant is not None:
                token = new_lease_token(claimant.incarnation)
                lease = {"worker": claimant.worker, "lease": claimant.lease, "token": token}
                row, claim = self._create_leased({**params, **lease})
            else:
                row = self._write_one(name, **params, notify=False)
        finally:
            # Unless the claim is handed over, the woken worker claims (after a leased
            # start whose rows did not read back, that finds nothing: see
            # _create_leased).
            self._wakeup.keep(sleeper, type_, made=row is not None, claim=claim)
        return row

    def _create_leased(self, params: dict[str, Any]) -> tuple[Row | None, Claim | None]:
        """``create_leased``, the start leased to a worker of this process: its row (the
        task's, None when its key was taken) and the claim its worker runs."""
        with self._statement() as conn:
            row = self._run(conn, "create_leased", self._params(**params)).fetchone()
            raw = None if row is None else self._claimed_instance(conn, row)
        if row is None:
            return None, None
        claim = None
        # Committed: a row that will not read back (nothing written by a start should be)
        # must not fail the start. The lease runs out, and the claim after it quarantines
        # the row with the reason.
        with suppress(ValueError, KeyError, TypeError):
            claim = Claim(task_record(row), self._checked(raw), started=True, more=False)
        return {"id": params["id"]}, claim

    # -- DagRuns: create and claim ---------------------------------------------------
    def dag_create(self, new: NewDagInstance) -> tuple[str, bool]:
        # One commit, as create: the instance, its run row, its events and its first node
        # task, unless the idempotency key is known.
        row = self._start(
            "dag_create",
            new.type,
            new.delay <= 0,
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
            trace=new.trace_context,
        )
        return self._created(row, new.idempotency_key) or self.dag_create(new)

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
        params = self._claim_params(types, worker, lease, limit, incarnation)
        with self._statement() as conn:
            rows = list(self._run(conn, "dag_claim", params).fetchall())
            claimed = [(r, self._claimed_instance(conn, r)) for r in rows]
        claims = []
        for r, raw in claimed:
            try:
                instance = self._checked(raw)
            except (ValueError, KeyError, TypeError) as exc:  # leased and started: set aside
                self.quarantine(str(r["instance_id"]), reason=f"corrupt row: {exc}", worker=worker)
                continue
            claims.append(Claim(task_record(r), instance, started=True, more=bool(r["more"])))
        return claims
