"""The PostgreSQL store: many processes on many machines.

psycopg 3 with a ``psycopg_pool`` pool of autocommit connections: every decision is one
statement (a chain of data-modifying CTEs), so it is one round trip and one commit.
Claims use ``FOR UPDATE SKIP LOCKED``. Runners sleep on ``LISTEN`` and wake on the
``pg_notify`` that a new or rescheduled task sends, or at the next due time.

``schema=`` puts every table in its own schema (tests use a fresh one each), and the
notification channel is per schema so neighbours do not wake each other.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from ..decide import Continue, Finish, KeepTask, Reschedule
from ..errors import ConcurrencyConflict, InvalidState, MigrationError, StoreError
from ..events import EventRecord, NewEvent, Status
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
    event_dicts,
    event_record,
    instance_record,
    new_event_dicts,
    projection_params,
    task_record,
)
from ._sql import migrations, queries

try:
    import psycopg
    from psycopg import sql
    from psycopg.rows import dict_row
    from psycopg.types.json import Jsonb
    from psycopg_pool import ConnectionPool
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the PostgreSQL store needs the postgres extra: pip install 'statemachine_wf[postgres]'"
    ) from exc

log = logging.getLogger("statemachine_wf.postgres")
Q = queries("postgres")
_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@contextmanager
def wrap_errors() -> Iterator[None]:
    """Translate driver errors in one place: a duplicate is a lost race, the rest StoreError."""
    try:
        yield
    except psycopg.errors.UniqueViolation as exc:
        raise ConcurrencyConflict("?", -1) from exc
    except psycopg.Error as exc:
        raise StoreError(f"postgres: {type(exc).__name__}: {exc}") from exc


def _encode(value: Any) -> Any:
    return Jsonb(value)


class PostgresStore:
    """A :class:`~statemachine_wf.store.Store` on PostgreSQL."""

    dialect = "postgres"

    def __init__(
        self,
        url: str,
        *,
        schema: str = "public",
        pool_size: int = 16,
        listen: bool = True,
    ) -> None:
        if not _IDENT.match(schema):
            raise ValueError(f"schema must be a lowercase identifier, got {schema!r}")
        self.url = url
        self.schema = schema
        self.channel = f"swf_wake_{schema}"
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "options": f"-c search_path={schema}",
            },
            open=False,
            name=f"swf-{schema}",
        )
        self._pool.open(wait=True, timeout=30)
        self._listen = listen
        self._wakeup = Wakeup()
        self._listener_lock = threading.Lock()
        self._listener: threading.Thread | None = None
        self._closed = threading.Event()
        self._migrated = False

    # -- plumbing ---------------------------------------------------------------------
    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        if not self._migrated:
            self._migrated = True
            self.migrate()
        with wrap_errors(), self._pool.connection() as conn:
            yield conn

    def _one(self, query: str, params: dict[str, Any]) -> dict[str, Any] | None:
        with self._conn() as conn:
            row: dict[str, Any] | None = conn.execute(query, params).fetchone()
            return row

    def _all(self, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        with self._conn() as conn:
            return list(conn.execute(query, params).fetchall())

    def close(self) -> None:
        self._closed.set()
        self.wake()
        if self._listener is not None:
            self._listener.join(timeout=5)
        self._pool.close()

    # -- schema -----------------------------------------------------------------------
    def migrate(self) -> int:
        self._migrated = True
        try:
            with self._pool.connection() as conn, conn.transaction():
                # One migrator at a time across every process.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.schema,))
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                )
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS wf_schema_migrations "
                    "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
                )
                rows: list[Any] = conn.execute(
                    "SELECT version FROM wf_schema_migrations"
                ).fetchall()
                done = {r["version"] for r in rows}
                for number, script in migrations("postgres"):
                    if number not in done:
                        conn.execute(script.encode())
                        conn.execute(
                            "INSERT INTO wf_schema_migrations (version) VALUES (%s)", (number,)
                        )
        except psycopg.Error as exc:
            raise MigrationError(f"postgres migration failed: {exc}") from exc
        return max((n for n, _ in migrations("postgres")), default=0)

    # -- producers --------------------------------------------------------------------
    def create(self, new: NewInstance) -> tuple[str, bool]:
        params = {
            "id": new.id,
            "type": new.type,
            "kind": new.kind,
            "step": new.initial,
            "input": Jsonb(new.input),
            "key": new.idempotency_key,
            "priority": new.priority,
            "parent_id": new.parent_id,
            "created": Jsonb({"input": new.input, "initial": new.initial}),
            "delay": new.delay,
            "channel": self.channel,
        }
        row = self._one(Q["create"], params)
        if row is not None:
            return str(row["id"]), True
        existing = self._one(Q["instance_by_key"], {"key": new.idempotency_key})
        if existing is None:  # the conflicting row vanished between the two statements
            return self.create(new)
        return str(existing["id"]), False

    # -- reads ------------------------------------------------------------------------
    def get(self, instance_id: str) -> InstanceRecord | None:
        row = self._one(Q["get_instance"], {"id": instance_id})
        return None if row is None else instance_record(row)

    def task(self, instance_id: str, slot: str = "") -> TaskRecord | None:
        row = self._one(Q["get_task"], {"id": instance_id, "slot": slot})
        return None if row is None else task_record(row)

    def events(self, instance_id: str) -> list[EventRecord]:
        return [event_record(r) for r in self._all(Q["events"], {"id": instance_id})]

    def list_instances(
        self,
        *,
        status: Sequence[Status] | None = None,
        type_prefix: str | None = None,
        limit: int = 100,
    ) -> list[InstanceRecord]:
        rows = self._all(
            "SELECT * FROM wf_instances"
            " WHERE (%(any_status)s OR status = ANY(%(status)s))"
            "   AND (%(pattern)s::text IS NULL OR type LIKE %(pattern)s)"
            " ORDER BY created_at DESC LIMIT %(limit)s",
            {
                "any_status": not status,
                "status": [str(s) for s in status or ()],
                "pattern": like_prefix(type_prefix) if type_prefix else None,
                "limit": limit,
            },
        )
        return [instance_record(r) for r in rows]

    def active(self, *, types: Sequence[str] | None = None) -> list[InstanceRecord]:
        found = [instance_record(r) for r in self._all(Q["active"], {})]
        return [i for i in found if types is None or i.type in types]

    # -- runners ----------------------------------------------------------------------
    def claim(
        self, *, worker: str, types: Sequence[str], lease: float, limit: int = 1
    ) -> list[Claim]:
        rows = self._all(
            Q["claim"],
            {
                "types": list(types),
                "worker": worker,
                "lease": lease,
                "limit": limit,
                "token": uuid.uuid4().hex,
            },
        )
        claims = []
        for row in rows:
            try:
                task = task_record(row)
                raw = row["instance"]
                if raw is None:
                    # The instance changed between our read and our write (an operator):
                    # we hold the task, but must look at the instance afresh.
                    claims.append(self._bare_claim(task, worker=worker, lease=lease))
                    continue
                claims.append(Claim(task, instance_record(raw), started=bool(row["started"])))
            except (ValueError, KeyError, TypeError) as exc:
                self.quarantine(
                    str(row["instance_id"]), reason=f"corrupt row: {exc!r}", worker=worker
                )
        return claims

    def _bare_claim(self, task: TaskRecord, *, worker: str, lease: float) -> Claim:
        with self._conn() as conn, conn.transaction():
            inst = conn.execute(Q["bump_version"], {"id": task.instance_id}).fetchone()
            leased = conn.execute(
                Q["lease_task"],
                {"task_id": task.id, "worker": worker, "lease": lease, "token": uuid.uuid4().hex},
            ).fetchone()
        assert inst is not None
        assert leased is not None
        return Claim(task_record(leased), instance_record(inst), started=False)

    def claim_instance(self, instance_id: str, *, worker: str, lease: float) -> Claim | None:
        with self._conn() as conn, conn.transaction():
            row = conn.execute(Q["claim_instance_lock"], {"id": instance_id, "worker": worker})
            locked = row.fetchone()
            if locked is None:
                return None
            inst = conn.execute(Q["bump_version"], {"id": instance_id}).fetchone()
            leased = conn.execute(
                Q["lease_task"],
                {
                    "task_id": locked["id"],
                    "worker": worker,
                    "lease": lease,
                    "token": uuid.uuid4().hex,
                },
            ).fetchone()
        assert inst is not None
        assert leased is not None
        return Claim(task_record(leased), instance_record(inst), started=False)

    def apply(self, commit: Commit) -> int:
        decision = commit.decision
        params = projection_params(decision.state, _encode)
        params.update(
            id=commit.instance_id,
            version=commit.version,
            worker=commit.worker,
            events=Jsonb(event_dicts(decision)),
            channel=self.channel,
            lease=commit.lease,
        )
        op = decision.task
        if isinstance(op, Continue):
            tail = "apply_continue"
            params.update(node=op.node, attempt=op.attempt, failures=op.failures)
        elif isinstance(op, Reschedule):
            tail = "apply_reschedule"
            params.update(
                node=op.node,
                delay=op.delay,
                failures=op.failures,
                attempt=decision.state.attempts.get(op.node, 0),
            )
        elif isinstance(op, Finish):
            tail = "apply_finish"
        else:
            assert isinstance(op, KeepTask)
            tail = "apply_keep"
        try:
            row = self._one(Q["apply_head"] + "\n" + Q[tail], params)
        except ConcurrencyConflict:
            raise ConcurrencyConflict(commit.instance_id, commit.version) from None
        if row is None:
            current = self.get(commit.instance_id)
            raise ConcurrencyConflict(
                commit.instance_id, commit.version, None if current is None else current.version
            )
        return int(row["version"])

    def acquire_lock(self, key: str, instance_id: str) -> str:
        row = self._one(Q["lock_acquire"], {"key": key, "id": instance_id})
        assert row is not None  # the insert or the existing row answers
        holder = str(row["holder"])
        if holder == instance_id:
            with self._conn() as conn:
                conn.execute(Q["lock_unwait"], {"key": key, "id": instance_id})
        return holder

    def release_locks(self, instance_id: str, *, key: str | None = None) -> int:
        row = self._one(Q["lock_release"], {"id": instance_id, "key": key, "channel": self.channel})
        return 0 if row is None else int(row["released"])

    def lock_holder(self, key: str) -> str | None:
        row = self._one(Q["lock_holder"], {"key": key})
        return None if row is None else str(row["holder"])

    def wake_instances(self, instance_ids: Sequence[str]) -> None:
        with self._conn() as conn:
            conn.execute(Q["wake_instances"], {"ids": list(instance_ids), "channel": self.channel})

    def heartbeat(self, *, worker: str, lease: float) -> int:
        with self._conn() as conn:
            return conn.execute(Q["heartbeat"], {"worker": worker, "lease": lease}).rowcount

    def release(self, *, worker: str, instance_ids: Sequence[str] | None = None) -> None:
        with self._conn() as conn:
            if instance_ids is None:
                conn.execute(Q["release_all"], {"worker": worker})
            else:
                conn.execute(Q["release"], {"worker": worker, "ids": list(instance_ids)})
            conn.execute("SELECT pg_notify(%s, 'release')", (self.channel,))

    def next_due(self, *, types: Sequence[str]) -> float | None:
        row = self._one(Q["next_due"], {"types": list(types)})
        if row is None or row["wait"] is None:
            return None
        return max(0.0, float(row["wait"]))

    def wait_for_work(self, timeout: float) -> bool:
        if self._listen and self._listener is None:
            self._start_listener()
        return self._wakeup.wait(timeout)

    def nudge(self) -> None:
        self._wakeup.nudge()

    def wake(self) -> None:
        self._wakeup.wake_all()

    def _start_listener(self) -> None:
        with self._listener_lock:
            if self._listener is not None:
                return
            ready = threading.Event()
            self._listener = threading.Thread(
                target=self._listen_loop, args=(ready,), name="swf-listen", daemon=True
            )
            self._listener.start()
        ready.wait(timeout=10)

    def _listen_loop(self, ready: threading.Event) -> None:
        # A dedicated connection: LISTEN state must not leak into the pool. On any error
        # (the server restarted) wake everyone, wait a little and connect again.
        while not self._closed.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    ready.set()
                    while not self._closed.is_set():
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self.nudge()
            except psycopg.Error as exc:
                log.warning("listener connection lost (%s); reconnecting", exc)
                ready.set()
                self.wake()
                self._closed.wait(1.0)

    # -- dead letters, maintenance -----------------------------------------------------
    def dead_letter(
        self, *, instance_id: str | None, envelope: dict[str, Any], reason: str, worker: str
    ) -> None:
        with self._conn() as conn:
            conn.execute(
                Q["dead_letter"],
                {
                    "instance_id": instance_id,
                    "envelope": Jsonb(envelope),
                    "reason": reason,
                    "worker": worker,
                },
            )

    def dead_letters(self, *, limit: int = 100) -> list[dict[str, Any]]:
        rows = self._all(Q["dead_letters"], {"limit": limit})
        return [
            {
                **r,
                "instance_id": None if r["instance_id"] is None else str(r["instance_id"]),
                "created_at": r["created_at"].timestamp()
                if isinstance(r["created_at"], datetime)
                else r["created_at"],
            }
            for r in rows
        ]

    def quarantine(self, instance_id: str, *, reason: str, worker: str) -> None:
        error = {"step": None, "code": "quarantined", "message": reason, "recoverable": True}
        with self._conn() as conn:
            conn.execute(
                Q["quarantine"],
                {"id": instance_id, "error": Jsonb(error), "reason": reason, "worker": worker},
            )

    def rebuild(self, instance_id: str, projection: Projection) -> None:
        params = projection_params(projection, _encode)
        params["id"] = instance_id
        with self._conn() as conn:
            conn.execute(Q["rebuild"], params)

    # -- DAG instances --------------------------------------------------------------------
    def dag_create(self, new: NewDagInstance) -> tuple[str, bool]:
        params = {
            "id": new.id,
            "type": new.type,
            "input": Jsonb(new.input),
            "key": new.idempotency_key,
            "priority": new.priority,
            "parent_id": new.parent_id,
            "name": new.name,
            "version": new.version,
            "test": new.test,
            "events": Jsonb(new_event_dicts(new.events)),
            "start": new.start,
            "delay": new.delay,
            "channel": self.channel,
        }
        row = self._one(Q["dag_create"], params)
        if row is not None:
            return str(row["id"]), True
        existing = self._one(Q["instance_by_key"], {"key": new.idempotency_key})
        if existing is None:
            return self.dag_create(new)
        return str(existing["id"]), False

    def dag_claim(
        self, *, worker: str, types: Sequence[str], lease: float, limit: int = 1
    ) -> list[Claim]:
        rows = self._all(
            Q["dag_claim"],
            {"types": list(types), "worker": worker, "lease": lease, "limit": limit},
        )
        return [Claim(task_record(r), instance_record(r["instance"]), started=True) for r in rows]

    def dag_record(self, instance_id: str, event: NewEvent, *, worker: str | None) -> bool:
        row = self._one(
            Q["dag_record"],
            {
                "id": instance_id,
                "node": event.node,
                "event_type": str(event.event_type),
                "attempt": event.attempt,
                "payload": Jsonb(event.payload),
                "error": None if event.error is None else Jsonb(event.error),
                "worker": worker,
            },
        )
        return row is not None

    def dag_snapshot(self, instance_id: str) -> DagSnapshot | None:
        # The version is read first: anything committed after it that matters bumps it,
        # so the CAS of a decision made on this snapshot fails rather than misleads.
        inst = self.get(instance_id)
        if inst is None:
            return None
        events = self.events(instance_id)
        slots = tuple(r["slot"] for r in self._all(Q["dag_slots"], {"id": instance_id}))
        return DagSnapshot(inst, events, slots)

    def dag_apply(self, commit: DagCommit) -> int:
        params = dag_apply_params(commit, Jsonb)
        params["channel"] = self.channel
        try:
            row = self._one(Q["dag_apply"], params)
        except ConcurrencyConflict:
            raise ConcurrencyConflict(commit.instance_id, commit.version) from None
        if row is None:
            current = self.get(commit.instance_id)
            raise ConcurrencyConflict(
                commit.instance_id, commit.version, None if current is None else current.version
            )
        return int(row["version"])

    def dag_save(self, name: str, definition: dict[str, Any]) -> int:
        for _ in range(10):
            try:
                row = self._one(Q["dag_save"], {"name": name, "definition": Jsonb(definition)})
            except ConcurrencyConflict:
                continue  # a concurrent save took this version number
            assert row is not None
            return int(row["version"])
        raise ConcurrencyConflict(name, -1)

    def dag_definition(
        self, name: str, version: int | None = None
    ) -> tuple[int, dict[str, Any]] | None:
        row = self._one(Q["dag_definition"], {"name": name, "version": version})
        return None if row is None else (int(row["version"]), dict(row["definition"]))

    def dag_definitions(self) -> list[tuple[str, int]]:
        return [(r["name"], int(r["version"])) for r in self._all(Q["dag_definitions"], {})]

    def dag_delete(self, name: str, *, cascade: bool = False) -> int:
        with self._conn() as conn, conn.transaction():
            used = conn.execute(Q["dag_instances_of"], {"name": name}).fetchone()
            assert used is not None
            if used["n"] and not cascade:
                raise InvalidState(
                    f"definition {name!r} is used by {used['n']} instance(s); "
                    "delete with cascade=True to delete them too"
                )
            conn.execute(Q["dag_delete_instances_of"], {"name": name})
            return conn.execute(Q["dag_delete_definition"], {"name": name}).rowcount

    def dag_delete_test_run(self, instance_id: str) -> bool:
        return self._one(Q["dag_delete_test_run"], {"id": instance_id}) is not None

    def drop_schema(self) -> None:
        """Drop this store's schema and everything in it (tests)."""
        with self._pool.connection() as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
            )
