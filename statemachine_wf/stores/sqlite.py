"""The SQLite store: zero setup, one machine, several processes.

WAL journal, ``BEGIN IMMEDIATE`` for every write (the writer lock is taken up front, so
two writers never deadlock on an upgrade), ``busy_timeout`` for waiting on it, and
``synchronous=FULL`` by default so a commit survives power loss. Each thread has its
own connection. Waiting runners wake on an in-process condition when this process adds
work, and notice other processes' commits through ``PRAGMA data_version``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from .. import decide
from ..errors import (
    InvalidState,
    NotFound,
    PayloadTooLarge,
    StoreError,
)
from ..limits import DEFAULT_MAX_PAYLOAD_BYTES
from ..store import (
    Claim,
    DagSnapshot,
    NewInstance,
    TaskRecord,
)
from ..waits import NewSignal
from ._common import (
    dumps,
    fast_start_allowed,
    instance_record,
    key_clash,
    loads,
    new_lease_token,
    signal_record,
    task_record,
    undecodable,
)
from ._sqliteconn import Q, SQLiteConnections, wrap_errors


def _quarantined(error: str | bytes | None) -> bool:
    """Whether an instance's stored error is a quarantine (set aside until redriven)."""
    if error is None:
        return False
    try:
        return bool(loads(error).get("code") == "quarantined")
    except (ValueError, AttributeError):
        return False


class SQLiteStore(SQLiteConnections):
    """A :class:`~statemachine_wf.store.Store` on one SQLite file (its connections are
    :class:`~statemachine_wf.stores._sqliteconn.SQLiteConnections`)."""

    dialect = "sqlite"
    json_decoded = False  # JSON columns are TEXT: decoded by the records

    # -- producers --------------------------------------------------------------------
    def create_many(self, news: Sequence[NewInstance]) -> list[tuple[str, bool]]:
        now = time.time()
        out: list[tuple[str, bool]] = []
        with self._write() as conn:
            keyed: dict[str, tuple[str, str]] = {}  # key -> (id, type), this batch's too
            for new in news:
                key = new.idempotency_key
                if key is not None and key not in keyed:
                    row = conn.execute(Q["instance_by_key"], {"key": key}).fetchone()
                    if row is not None:
                        keyed[key] = (str(row["id"]), str(row["type"]))
                if key is not None and key in keyed:
                    existing_id, existing_type = keyed[key]
                    if existing_type != new.type:
                        raise key_clash(key, existing_id, existing_type, new.type)
                    out.append((existing_id, False))
                    continue
                self._run(conn, "create", {**self._create_params(new), "now": now})
                if key is not None:
                    keyed[key] = (new.id, new.type)
                out.append((new.id, True))
        if any(created for _, created in out):
            self.nudge()
        return out

    # -- runners ----------------------------------------------------------------------
    def claim(
        self,
        *,
        worker: str,
        types: Sequence[str],
        lease: float,
        limit: int = 1,
        incarnation: str = "",
    ) -> list[Claim]:
        now = time.time()
        where, params = _type_filter(types)
        sql = (
            "SELECT * FROM wf_tasks WHERE due_at <= ? AND kind = 'machine'"
            + where
            + " ORDER BY priority, due_at LIMIT ?"
        )
        claims: list[Claim] = []
        with self._write() as conn:
            rows = conn.execute(sql, [now, *params, limit]).fetchall()
            for row in rows:
                task = task_record(row)
                try:
                    claims.append(
                        self._lease(
                            conn, task, worker=worker, lease=lease, now=now, inc=incarnation
                        )
                    )
                except (ValueError, KeyError, TypeError) as exc:
                    self._run(
                        conn,
                        "quarantine",
                        self._quarantine_params(task.instance_id, f"corrupt row: {exc}", worker),
                    )
        return claims

    def claim_instance(
        self, instance_id: str, *, worker: str, lease: float, incarnation: str = ""
    ) -> Claim | None:
        now = time.time()
        with self._write() as conn:
            row = conn.execute(Q["get_task"], {"id": instance_id, "slot": ""}).fetchone()
            if row is None:
                return None
            task = task_record(row)
            if task.lease_owner is not None and task.due_at > now:
                return None  # a live runner holds it
            row = conn.execute(Q["get_instance"], {"id": instance_id}).fetchone()
            held_back = _quarantined(row["error"])
            stalled = row["status"] == "STALLED"
            if not (task.due_at <= now or (not held_back and (task.in_flight or stalled))):
                # Waiting out a backoff or a timer, or quarantined (only its parked task
                # or a redrive takes it again): not ours to hurry.
                return None

            try:
                return self._lease(
                    conn, task, worker=worker, lease=lease, now=now, start=False, inc=incarnation
                )
            except (ValueError, KeyError, TypeError) as exc:
                self._run(
                    conn,
                    "quarantine",
                    self._quarantine_params(task.instance_id, f"corrupt row: {exc}", worker),
                )
                return None

    def _lease(
        self,
        conn: sqlite3.Connection,
        task: TaskRecord,
        *,
        worker: str,
        lease: float,
        now: float,
        start: bool = True,
        inc: str = "",
    ) -> Claim:
        instance = instance_record(
            conn.execute(Q["get_instance"], {"id": task.instance_id}).fetchone()
        )
        problem = undecodable(instance)
        if problem is not None:
            raise ValueError(problem)  # the caller quarantines it: a dead letter, the reason
        # A fresh token per claim: a heartbeat or a hand-back names it, so a runner that
        # lost this lease (it expired and another claim took the task) touches nothing.
        token = new_lease_token(inc)
        lease_params = {"task_id": task.id, "worker": worker, "token": token, "due_at": now + lease}
        if start and fast_start_allowed(instance, task):
            decision = decide.start(
                instance.projection(in_flight=False), task.node, failures=task.failures
            )
            written = self._write_decision(
                conn, instance.id, instance.version, decision, worker, lease
            )
            if written is None:  # under the writer lock since the read: cannot happen
                raise StoreError(f"sqlite: claim of {instance.id}: version changed under it")
            version = int(written["version"])
            conn.execute(Q["lease_task"], lease_params)
            attempt = decision.state.attempts[task.node]  # the attempt decide.start began
            task = _leased(task, worker, now + lease, attempt, started=True, token=token)
            instance = instance_record(
                conn.execute(Q["get_instance"], {"id": task.instance_id}).fetchone()
            )
            if instance.version != version:
                raise StoreError(f"sqlite: claim of {instance.id}: version changed under it")
            return Claim(task, instance, started=True)
        # No intent written, but the version is bumped all the same: an earlier holder of
        # this task (its lease expired) loses its next CAS instead of writing over ours.
        bump = {"id": instance.id, "version": instance.version, "now": now}
        conn.execute(Q["bump_version"], bump)
        conn.execute(Q["lease_task"], lease_params)
        bumped = instance_record(conn.execute(Q["get_instance"], {"id": instance.id}).fetchone())
        leased = _leased(task, worker, now + lease, task.attempt, started=False, token=token)
        signals = None
        if bumped.waiting is not None:  # read with the claim, as on PostgreSQL
            rows = conn.execute(Q["signals_pending"], {"instance_id": instance.id, "now": now})
            signals = tuple(signal_record(r, decoded=False) for r in rows)
        return Claim(leased, bumped, started=False, signals=signals)

    # -- signals and timers ---------------------------------------------------------------
    def _signal_refusal(self, exc: StoreError, new: NewSignal) -> Exception | None:
        # The trigger's refusals (sql/sqlite/005_signals.sql), told apart by their text.
        text = str(exc)
        if "no such workflow instance" in text:
            return NotFound(f"no workflow instance {new.instance_id!r}")
        if "has ended" in text:
            return InvalidState(
                f"workflow instance {new.instance_id} has ended; it takes no more signals"
            )
        if "payload over the limit" in text:
            # The limit in wf_settings (migration 006) is below this process's.
            size = len(dumps(new.payload).encode())
            return PayloadTooLarge(f"signal {new.name!r} payload", size, self._max_payload_bytes())
        return None

    def _max_payload_bytes(self) -> int:
        with wrap_errors():
            row = self._conn().execute(Q["get_setting"], {"name": "max_payload_bytes"}).fetchone()
        return DEFAULT_MAX_PAYLOAD_BYTES if row is None else int(row["value"])

    # -- DAG instances --------------------------------------------------------------------
    def _claimed_instance(self, conn: sqlite3.Connection, row: sqlite3.Row) -> sqlite3.Row | None:
        # Read as columns inside the claim's transaction (see SqlStore._claimed_instance).
        found: sqlite3.Row | None = conn.execute(
            Q["get_instance"], {"id": row["instance_id"]}
        ).fetchone()
        return found

    def dag_snapshot(self, instance_id: str, *, after_seq: int = 0) -> DagSnapshot | None:
        # The version is read first: anything committed after it that matters bumps it,
        # so the CAS of a decision made on this snapshot fails rather than misleads.
        inst = self.get(instance_id)
        if inst is None:
            return None
        events = self.events(instance_id, after_seq=after_seq)
        with wrap_errors():
            rows = self._conn().execute(Q["dag_slots"], {"id": instance_id}).fetchall()
        return DagSnapshot(inst, events, tuple(r["slot"] for r in rows))


def _leased(
    task: TaskRecord, worker: str, due_at: float, attempt: int, *, started: bool, token: str
) -> TaskRecord:
    """``task`` as this claim left it: leased to ``worker`` under ``token``.

    The token is what fences a later heartbeat or hand-back to this claim alone; a claim
    returned without it would let a release by instance id free every lease the worker
    holds on the instance (a DAG's sibling nodes included), as PostgreSQL's RETURNING
    never would.
    """
    return TaskRecord(
        id=task.id,
        instance_id=task.instance_id,
        slot=task.slot,
        node=task.node,
        kind=task.kind,
        type=task.type,
        priority=task.priority,
        due_at=due_at,
        attempt=attempt,
        in_flight=True if started else task.in_flight,
        failures=task.failures,
        lease_owner=worker,
        leased=True,
        lease_token=token,
    )


def _type_filter(types: Sequence[str]) -> tuple[str, list[str]]:
    # The number of placeholders is the only thing formatted in; the names are parameters.
    return " AND type IN (" + ",".join("?" * len(types)) + ")", list(types)
