"""The SQLite store: zero setup, one machine, several processes.

WAL journal, ``BEGIN IMMEDIATE`` for every write (the writer lock is taken up front, so
two writers never deadlock on an upgrade), ``busy_timeout`` for waiting on it, and
``synchronous=FULL`` by default so a commit survives power loss. Each thread has its
own connection. Waiting runners wake on an in-process condition when this process adds
work, and notice other processes' commits through ``PRAGMA data_version``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .. import decide
from ..decide import Continue, Decision, Finish, KeepTask, Reschedule
from ..errors import ConcurrencyConflict, InvalidState, MigrationError, StoreError
from ..events import Ev, EventRecord, NewEvent, Status
from ..fold import Projection
from ..store import (
    Claim,
    Commit,
    DagCommit,
    DagSnapshot,
    InstanceRecord,
    NewDagInstance,
    NewInstance,
    TaskRecord,
    like_prefix,
)
from ._common import (
    Wakeup,
    dag_apply_params,
    dumps,
    event_dicts,
    event_record,
    fast_start_allowed,
    instance_record,
    new_event_dicts,
    projection_params,
    task_record,
)
from ._sql import migrations, queries

Q = queries("sqlite")
log = logging.getLogger("statemachine_wf.sqlite")


@contextmanager
def wrap_errors() -> Iterator[None]:
    """Translate driver errors in one place."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"sqlite: {exc}") from exc


class SQLiteStore:
    """A :class:`~statemachine_wf.store.Store` on one SQLite file."""

    dialect = "sqlite"

    def __init__(self, path: str, *, synchronous: str = "FULL", busy_timeout: float = 30.0):
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        self.path = path
        self.synchronous = synchronous.upper()
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._wakeup = Wakeup()
        self._writer = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._closed = threading.Event()
        self._migrated = False

    # -- connections ------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            with wrap_errors():
                conn = sqlite3.connect(
                    self.path,
                    timeout=self.busy_timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
                conn.row_factory = sqlite3.Row
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(f"PRAGMA synchronous={self.synchronous}")  # validated above
                conn.execute("PRAGMA foreign_keys=ON")
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        if not self._migrated:
            self._migrated = True
            self.migrate()
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        # Threads of this process queue here: SQLite's own busy handler backs off with
        # sleeps of up to 100 ms, which would dominate a step. Other processes still
        # meet the file lock and busy_timeout.
        with self._writer:
            with wrap_errors():
                conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                with wrap_errors():
                    conn.execute("ROLLBACK")
                raise
            with wrap_errors():
                conn.execute("COMMIT")

    def close(self) -> None:
        self._closed.set()
        if self._watcher is not None:
            self._watcher.join(timeout=2)
            self._watcher = None
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()
        self._local = threading.local()

    # -- schema -----------------------------------------------------------------------
    def migrate(self) -> int:
        self._migrated = True
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS wf_schema_migrations "
                "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM wf_schema_migrations")}
            for number, script in migrations("sqlite"):
                if number in done:
                    continue
                for statement in _statements(script):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO wf_schema_migrations VALUES (?, ?)", (number, time.time())
                )
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise MigrationError(f"sqlite migration failed: {exc}") from exc
        return max((n for n, _ in migrations("sqlite")), default=0)

    # -- producers --------------------------------------------------------------------
    def create(self, new: NewInstance) -> tuple[str, bool]:
        now = time.time()
        with self._write() as conn:
            if new.idempotency_key is not None:
                row = conn.execute(Q["instance_by_key"], {"key": new.idempotency_key}).fetchone()
                if row is not None:
                    return str(row["id"]), False
            conn.execute(
                Q["insert_instance"],
                {
                    "id": new.id,
                    "type": new.type,
                    "kind": new.kind,
                    "step": new.initial,
                    "input": dumps(new.input),
                    "key": new.idempotency_key,
                    "priority": new.priority,
                    "parent_id": new.parent_id,
                    "now": now,
                },
            )
            self._insert_events(
                conn,
                new.id,
                [
                    {
                        "node": None,
                        "event_type": str(Ev.CREATED),
                        "attempt": None,
                        "payload": {"input": new.input, "initial": new.initial},
                        "error": None,
                    }
                ],
                worker=None,
                now=now,
            )
            conn.execute(
                Q["insert_task"],
                {
                    "instance_id": new.id,
                    "node": new.initial,
                    "kind": new.kind,
                    "type": new.type,
                    "priority": new.priority,
                    "due_at": now + new.delay,
                    "now": now,
                },
            )
        self.nudge()
        return new.id, True

    # -- reads ------------------------------------------------------------------------
    def get(self, instance_id: str) -> InstanceRecord | None:
        with wrap_errors():
            row = self._conn().execute(Q["get_instance"], {"id": instance_id}).fetchone()
        return None if row is None else instance_record(row)

    def task(self, instance_id: str, slot: str = "") -> TaskRecord | None:
        with wrap_errors():
            row = self._conn().execute(Q["get_task"], {"id": instance_id, "slot": slot}).fetchone()
        return None if row is None else task_record(row, now=time.time())

    def events(self, instance_id: str) -> list[EventRecord]:
        with wrap_errors():
            rows = self._conn().execute(Q["events"], {"id": instance_id}).fetchall()
        return [event_record(r) for r in rows]

    def list_instances(
        self,
        *,
        status: Sequence[Status] | None = None,
        type_prefix: str | None = None,
        limit: int = 100,
    ) -> list[InstanceRecord]:
        sql = "SELECT * FROM wf_instances WHERE 1=1"
        params: list[Any] = []
        if status:
            sql += " AND status IN (" + ",".join("?" * len(status)) + ")"
            params += [str(s) for s in status]
        if type_prefix:
            sql += " AND type LIKE ? ESCAPE '\\'"
            params.append(like_prefix(type_prefix))
        sql += " ORDER BY created_at DESC LIMIT ?"
        params.append(limit)
        with wrap_errors():
            rows = self._conn().execute(sql, params).fetchall()
        return [instance_record(r) for r in rows]

    def active(self, *, types: Sequence[str] | None = None) -> list[InstanceRecord]:
        with wrap_errors():
            rows = self._conn().execute(Q["active"]).fetchall()
        found = [instance_record(r) for r in rows]
        return [i for i in found if types is None or i.type in types]

    # -- runners ----------------------------------------------------------------------
    def claim(
        self, *, worker: str, types: Sequence[str], lease: float, limit: int = 1
    ) -> list[Claim]:
        now = time.time()
        where, params = _type_filter(types)
        sql = (
            "SELECT * FROM wf_tasks WHERE due_at <= ?"
            + where
            + " ORDER BY priority, due_at LIMIT ?"
        )
        claims: list[Claim] = []
        with self._write() as conn:
            rows = conn.execute(sql, [now, *params, limit]).fetchall()
            for row in rows:
                task = task_record(row)
                try:
                    claims.append(self._lease(conn, task, worker=worker, lease=lease, now=now))
                except (ValueError, KeyError, TypeError) as exc:
                    self._quarantine(conn, task.instance_id, f"corrupt row: {exc!r}", worker, now)
        return claims

    def claim_instance(self, instance_id: str, *, worker: str, lease: float) -> Claim | None:
        now = time.time()
        with self._write() as conn:
            row = conn.execute(Q["get_task"], {"id": instance_id, "slot": ""}).fetchone()
            if row is None:
                return None
            task = task_record(row)
            if task.lease_owner is not None and task.due_at > now:
                return None  # a live runner holds it
            status = conn.execute(Q["get_instance"], {"id": instance_id}).fetchone()["status"]
            if not (task.in_flight or task.due_at <= now or status == "STALLED"):
                return None  # waiting out a backoff or a timer: not ours to hurry

            return self._lease(conn, task, worker=worker, lease=lease, now=now, start=False)

    def _lease(
        self,
        conn: sqlite3.Connection,
        task: TaskRecord,
        *,
        worker: str,
        lease: float,
        now: float,
        start: bool = True,
    ) -> Claim:
        instance = instance_record(
            conn.execute(Q["get_instance"], {"id": task.instance_id}).fetchone()
        )
        token = uuid.uuid4().hex
        lease_params = {"task_id": task.id, "worker": worker, "token": token, "due_at": now + lease}
        if start and fast_start_allowed(instance, task):
            decision = decide.start(
                instance.projection(in_flight=False), task.node, failures=task.failures
            )
            version = self._write_decision(
                conn, instance.id, instance.version, decision, worker, lease, now
            )
            conn.execute(Q["lease_task"], lease_params)
            assert isinstance(decision.task, Continue)
            task = _leased(task, worker, now + lease, decision.task.attempt, started=True)
            task = dataclasses.replace(task, lease_token=token)
            instance = instance_record(
                conn.execute(Q["get_instance"], {"id": task.instance_id}).fetchone()
            )
            assert instance.version == version
            return Claim(task, instance, started=True)
        conn.execute(
            Q["bump_version"], {"id": instance.id, "version": instance.version, "now": now}
        )
        conn.execute(Q["lease_task"], lease_params)
        bumped = instance_record(conn.execute(Q["get_instance"], {"id": instance.id}).fetchone())
        leased = _leased(task, worker, now + lease, task.attempt, started=False)
        return Claim(dataclasses.replace(leased, lease_token=token), bumped, started=False)

    def apply(self, commit: Commit) -> int:
        now = time.time()
        with self._write() as conn:
            version = self._write_decision(
                conn,
                commit.instance_id,
                commit.version,
                commit.decision,
                commit.worker,
                commit.lease,
                now,
            )
        if isinstance(commit.decision.task, Reschedule | Finish):
            self.nudge()
        return version

    def _write_decision(
        self,
        conn: sqlite3.Connection,
        instance_id: str,
        version: int,
        decision: Decision,
        worker: str | None,
        lease: float,
        now: float,
    ) -> int:
        params = projection_params(decision.state, dumps)
        params.update(id=instance_id, version=version, now=now)
        cur = conn.execute(Q["update_projection"], params)
        if cur.rowcount != 1:
            row = conn.execute(Q["get_instance"], {"id": instance_id}).fetchone()
            raise ConcurrencyConflict(
                instance_id, version, None if row is None else int(row["version"])
            )
        self._insert_events(conn, instance_id, event_dicts(decision), worker=worker, now=now)
        op = decision.task
        if isinstance(op, Continue):
            conn.execute(
                Q["task_continue"],
                {
                    "instance_id": instance_id,
                    "node": op.node,
                    "attempt": op.attempt,
                    "failures": op.failures,
                    "worker": worker,
                    "due_at": now + lease,
                },
            )
        elif isinstance(op, Reschedule):
            conn.execute(
                Q["task_reschedule"],
                {
                    "instance_id": instance_id,
                    "node": op.node,
                    "attempt": decision.state.attempts.get(op.node, 0),
                    "failures": op.failures,
                    "due_at": now + op.delay,
                    "now": now,
                },
            )
        elif isinstance(op, Finish):
            conn.execute(Q["task_finish"], {"instance_id": instance_id})
            self._release_locks(conn, instance_id, None, now)
        else:
            assert isinstance(op, KeepTask)
        return version + 1

    def _insert_events(
        self,
        conn: sqlite3.Connection,
        instance_id: str,
        events: list[dict[str, Any]],
        *,
        worker: str | None,
        now: float,
    ) -> None:
        try:
            conn.executemany(
                Q["insert_event"],
                [
                    {
                        **e,
                        "instance_id": instance_id,
                        "payload": dumps(e["payload"]),
                        "error": None if e["error"] is None else dumps(e["error"]),
                        "worker": worker,
                        "now": now,
                    }
                    for e in events
                ],
            )
        except sqlite3.IntegrityError as exc:
            # The unique index refused a duplicate once-per-attempt event: somebody else
            # already wrote this decision. Treat it like a lost CAS.
            raise ConcurrencyConflict(instance_id, -1) from exc

    def acquire_lock(self, key: str, instance_id: str) -> str:
        now = time.time()
        params = {"key": key, "id": instance_id, "now": now}
        with self._write() as conn:
            conn.execute(Q["lock_insert"], params)
            holder = str(conn.execute(Q["lock_holder"], params).fetchone()["holder"])
            if holder == instance_id:
                conn.execute(Q["lock_unwait"], params)
            else:
                conn.execute(Q["lock_wait"], params)
        return holder

    def release_locks(self, instance_id: str, *, key: str | None = None) -> int:
        with self._write() as conn:
            released = self._release_locks(conn, instance_id, key, time.time())
        if released:
            self.nudge()
        return released

    def _release_locks(
        self, conn: sqlite3.Connection, instance_id: str, key: str | None, now: float
    ) -> int:
        keys = [r["key"] for r in conn.execute(Q["lock_held"], {"id": instance_id, "key": key})]
        for k in keys:
            conn.execute(Q["lock_delete"], {"id": instance_id, "key": k})
            conn.execute(Q["lock_wake"], {"key": k, "now": now})
        return len(keys)

    def lock_holder(self, key: str) -> str | None:
        with wrap_errors():
            row = self._conn().execute(Q["lock_holder"], {"key": key}).fetchone()
        return None if row is None else str(row["holder"])

    def wake_instances(self, instance_ids: Sequence[str]) -> None:
        now = time.time()
        with self._write() as conn:
            for instance_id in instance_ids:
                conn.execute(Q["wake_instance"], {"id": instance_id, "now": now})
        self.nudge()

    def heartbeat(self, *, worker: str, lease: float) -> int:
        now = time.time()
        with self._write() as conn:
            return conn.execute(
                Q["heartbeat"], {"worker": worker, "due_at": now + lease, "now": now}
            ).rowcount

    def release(self, *, worker: str, instance_ids: Sequence[str] | None = None) -> None:
        now = time.time()
        with self._write() as conn:
            if instance_ids is None:
                conn.execute(Q["release_all"], {"worker": worker, "now": now})
            for instance_id in instance_ids or ():
                conn.execute(
                    Q["release"], {"worker": worker, "instance_id": instance_id, "now": now}
                )
        self.nudge()

    def next_due(self, *, types: Sequence[str]) -> float | None:
        where, params = _type_filter(types)
        with wrap_errors():
            row = (
                self._conn()
                .execute("SELECT min(due_at) FROM wf_tasks WHERE 1=1" + where, params)
                .fetchone()
            )
        if row is None or row[0] is None:
            return None
        return max(0.0, float(row[0]) - time.time())

    def wait_for_work(self, timeout: float) -> bool:
        self._ensure_watcher()
        return self._wakeup.wait(timeout)

    def nudge(self) -> None:
        self._wakeup.nudge()

    def wake(self) -> None:
        self._wakeup.wake_all()

    def _ensure_watcher(self) -> None:
        # One thread per store notices other processes' commits through PRAGMA
        # data_version (a shared-memory read, no query) and wakes one worker.
        with self._lock:
            if self._watcher is not None:
                return
            self._watcher = threading.Thread(
                target=self._watch, name="swf-sqlite-watch", daemon=True
            )
            self._watcher.start()

    def _watch(self) -> None:
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, check_same_thread=False)
        try:
            seen = conn.execute("PRAGMA data_version").fetchone()[0]
            while not self._closed.wait(0.005):
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != seen:
                    seen = version
                    self.nudge()
        except sqlite3.Error:
            log.exception("sqlite watcher stopped; workers fall back to their due-time sleeps")
        finally:
            conn.close()

    # -- dead letters, maintenance -----------------------------------------------------
    def dead_letter(
        self, *, instance_id: str | None, envelope: dict[str, Any], reason: str, worker: str
    ) -> None:
        with self._write() as conn:
            conn.execute(
                Q["dead_letter"],
                {
                    "instance_id": instance_id,
                    "envelope": dumps(envelope),
                    "reason": reason,
                    "worker": worker,
                    "now": time.time(),
                },
            )

    def dead_letters(self, *, limit: int = 100) -> list[dict[str, Any]]:
        with wrap_errors():
            rows = self._conn().execute(Q["dead_letters"], {"limit": limit}).fetchall()
        return [{**dict(r), "envelope": json.loads(r["envelope"])} for r in rows]

    def quarantine(self, instance_id: str, *, reason: str, worker: str) -> None:
        with self._write() as conn:
            self._quarantine(conn, instance_id, reason, worker, time.time())

    def _quarantine(
        self, conn: sqlite3.Connection, instance_id: str, reason: str, worker: str, now: float
    ) -> None:
        error = {"step": None, "code": "quarantined", "message": reason, "recoverable": True}
        conn.execute(
            Q["quarantine_instance"], {"id": instance_id, "error": dumps(error), "now": now}
        )
        conn.execute(Q["quarantine_task"], {"instance_id": instance_id, "due_at": now + 86400.0})
        self._insert_events(
            conn,
            instance_id,
            [
                {
                    "node": None,
                    "event_type": str(Ev.QUARANTINED),
                    "attempt": None,
                    "payload": {},
                    "error": error,
                }
            ],
            worker=worker,
            now=now,
        )
        row = conn.execute(Q["raw_instance"], {"id": instance_id}).fetchone()
        envelope = dict(row) if row is not None else {"id": instance_id}
        conn.execute(
            Q["dead_letter"],
            {
                "instance_id": instance_id,
                "envelope": dumps(envelope),
                "reason": reason,
                "worker": worker,
                "now": now,
            },
        )

    def rebuild(self, instance_id: str, projection: Projection) -> None:
        params = projection_params(projection, dumps)
        params.update(id=instance_id, now=time.time())
        with self._write() as conn:
            conn.execute(Q["rebuild"], params)

    # -- DAG instances --------------------------------------------------------------------
    def dag_create(self, new: NewDagInstance) -> tuple[str, bool]:
        now = time.time()
        with self._write() as conn:
            if new.idempotency_key is not None:
                row = conn.execute(Q["instance_by_key"], {"key": new.idempotency_key}).fetchone()
                if row is not None:
                    return str(row["id"]), False
            conn.execute(
                Q["dag_insert_instance"],
                {
                    "id": new.id,
                    "type": new.type,
                    "input": dumps(new.input),
                    "key": new.idempotency_key,
                    "priority": new.priority,
                    "parent_id": new.parent_id,
                    "now": now,
                },
            )
            conn.execute(
                Q["dag_insert_run"],
                {"id": new.id, "name": new.name, "version": new.version, "test": int(new.test)},
            )
            self._insert_events(conn, new.id, new_event_dicts(new.events), worker=None, now=now)
            conn.execute(
                Q["dag_insert_task"],
                {
                    "instance_id": new.id,
                    "node": new.start,
                    "due_at": now + new.delay,
                    "attempt": 0,
                    "now": now,
                },
            )
        self.nudge()
        return new.id, True

    def dag_claim(
        self, *, worker: str, types: Sequence[str], lease: float, limit: int = 1
    ) -> list[Claim]:
        now = time.time()
        where, params = _type_filter(types)
        sql = Q["dag_due"] + where + " ORDER BY priority, due_at LIMIT ?"
        claims: list[Claim] = []
        with self._write() as conn:
            rows = conn.execute(sql, [now, *params, limit]).fetchall()
            for row in rows:
                task = task_record(row)
                conn.execute(
                    Q["dag_lease"], {"task_id": task.id, "worker": worker, "due_at": now + lease}
                )
                conn.execute(
                    Q["dag_started"],
                    {
                        "instance_id": task.instance_id,
                        "node": task.slot,
                        "attempt": task.attempt + 1,
                        "payload": dumps({"failures": task.failures}),
                        "worker": worker,
                        "now": now,
                    },
                )
                inst = conn.execute(Q["get_instance"], {"id": task.instance_id}).fetchone()
                leased = _leased(task, worker, now + lease, task.attempt + 1, started=True)
                claims.append(Claim(leased, instance_record(inst), started=True))
        return claims

    def dag_record(self, instance_id: str, event: NewEvent, *, worker: str | None) -> bool:
        with self._write() as conn:
            cur = conn.execute(
                Q["dag_record"],
                {
                    "id": instance_id,
                    "node": event.node,
                    "event_type": str(event.event_type),
                    "attempt": event.attempt,
                    "payload": dumps(event.payload),
                    "error": None if event.error is None else dumps(event.error),
                    "worker": worker,
                    "now": time.time(),
                },
            )
            return cur.rowcount == 1

    def dag_snapshot(self, instance_id: str) -> DagSnapshot | None:
        # The version is read first (see PostgresStore.dag_snapshot).
        inst = self.get(instance_id)
        if inst is None:
            return None
        events = self.events(instance_id)
        with wrap_errors():
            rows = self._conn().execute(Q["dag_slots"], {"id": instance_id}).fetchall()
        return DagSnapshot(inst, events, tuple(r["slot"] for r in rows))

    def dag_apply(self, commit: DagCommit) -> int:
        now = time.time()
        params = dag_apply_params(commit, dumps)
        d = commit.decision
        with self._write() as conn:
            cur = conn.execute(
                Q["dag_update_instance"],
                {
                    "id": commit.instance_id,
                    "version": commit.version,
                    "status": params["status"],
                    "progress": params["progress"],
                    "error": params["error"],
                    "now": now,
                },
            )
            if cur.rowcount != 1:
                row = conn.execute(Q["get_instance"], {"id": commit.instance_id}).fetchone()
                raise ConcurrencyConflict(
                    commit.instance_id, commit.version, None if row is None else int(row["version"])
                )
            self._insert_events(
                conn,
                commit.instance_id,
                new_event_dicts(d.events),
                worker=commit.worker,
                now=now,
            )
            if d.finish:
                conn.execute(Q["dag_tasks_finish"], {"instance_id": commit.instance_id})
            elif d.done is not None:
                conn.execute(
                    Q["dag_task_done"], {"instance_id": commit.instance_id, "slot": d.done}
                )
            if d.retry is not None:
                conn.execute(
                    Q["dag_task_retry"],
                    {
                        "instance_id": commit.instance_id,
                        "slot": d.retry.node,
                        "due_at": now + d.retry.delay,
                        "failures": d.retry.failures,
                        "worker": commit.worker,
                    },
                )
            for t in d.dispatch:
                try:
                    conn.execute(
                        Q["dag_insert_task"],
                        {
                            "instance_id": commit.instance_id,
                            "node": t.node,
                            "due_at": now + t.delay,
                            "attempt": t.attempt,
                            "now": now,
                        },
                    )
                except sqlite3.IntegrityError as exc:
                    raise ConcurrencyConflict(commit.instance_id, commit.version) from exc
        if d.dispatch or d.retry is not None:
            self.nudge()
        return commit.version + 1

    def dag_save(self, name: str, definition: dict[str, Any]) -> int:
        with self._write() as conn:
            row = conn.execute(
                Q["dag_save"], {"name": name, "definition": dumps(definition), "now": time.time()}
            ).fetchone()
        return int(row["version"])

    def dag_definition(
        self, name: str, version: int | None = None
    ) -> tuple[int, dict[str, Any]] | None:
        with wrap_errors():
            row = (
                self._conn()
                .execute(Q["dag_definition"], {"name": name, "version": version})
                .fetchone()
            )
        return None if row is None else (int(row["version"]), json.loads(row["definition"]))

    def dag_definitions(self) -> list[tuple[str, int]]:
        with wrap_errors():
            rows = self._conn().execute(Q["dag_definitions"]).fetchall()
        return [(r["name"], int(r["version"])) for r in rows]

    def dag_delete(self, name: str, *, cascade: bool = False) -> int:
        with self._write() as conn:
            used = int(conn.execute(Q["dag_instances_of"], {"name": name}).fetchone()["n"])
            if used and not cascade:
                raise InvalidState(
                    f"definition {name!r} is used by {used} instance(s); "
                    "delete with cascade=True to delete them too"
                )
            conn.execute(Q["dag_delete_instances_of"], {"name": name})
            return conn.execute(Q["dag_delete_definition"], {"name": name}).rowcount

    def dag_delete_test_run(self, instance_id: str) -> bool:
        with self._write() as conn:
            return conn.execute(Q["dag_delete_test_run"], {"id": instance_id}).rowcount == 1


def _leased(
    task: TaskRecord, worker: str, due_at: float, attempt: int, *, started: bool
) -> TaskRecord:
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
    )


def _type_filter(types: Sequence[str]) -> tuple[str, list[str]]:
    # The number of placeholders is the only thing formatted in; the names are parameters.
    return " AND type IN (" + ",".join("?" * len(types)) + ")", list(types)


def _statements(script: str) -> list[str]:
    lines = [line for line in script.splitlines() if not line.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
