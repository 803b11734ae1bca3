"""Test-only workflows and the external ledger the crash tests count side effects in.

The ledger lives outside the workflow store (its own SQLite file, or its own table in
the test's Postgres schema) and survives a SIGKILL of the runner. Each action follows the
"only increment once" pattern: it records a set-once identity with ``ctx.save`` *before*
its side effect, and the side effect is an insert that is idempotent on that identity.
A rerun of the step after a crash reads the saved identity back and inserts nothing new,
so ``effects`` holds exactly one row per (instance, step) however often the step ran.
``runs`` is deliberately *not* idempotent: it counts every execution, so a test can show
that a step really did run again.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
import uuid
from collections import Counter
from typing import Any, Protocol

from pydantic import BaseModel

from statemachine_wf.definition.workflow import COMPLETED, Workflow, step
from statemachine_wf.runtime.context import StepContext

STEPS = ("first", "second", "third")
KEY_FIELD = {"first": "key_first", "second": "key_second", "third": "key_third"}


class Ledger(Protocol):
    def record_run(self, instance_id: str, step: str, attempt: int) -> None: ...
    def apply_once(self, key: str, instance_id: str, step: str) -> None: ...
    def effects(self) -> list[tuple[str, str, str]]: ...
    def runs(self) -> Counter[tuple[str, str]]: ...
    def close(self) -> None: ...


class SQLiteLedger:
    """The ledger in its own SQLite file (one connection per thread, autocommit)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()
        with self._conn() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS effects "
                "(key TEXT PRIMARY KEY, instance_id TEXT NOT NULL, step TEXT NOT NULL)"
            )
            conn.execute(
                "CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                "instance_id TEXT NOT NULL, step TEXT NOT NULL, attempt INTEGER, pid INTEGER)"
            )

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
            self._local.conn = conn
        return conn

    def record_run(self, instance_id: str, step: str, attempt: int) -> None:
        self._conn().execute(
            "INSERT INTO runs (instance_id, step, attempt, pid) VALUES (?, ?, ?, ?)",
            (instance_id, step, attempt, os.getpid()),
        )

    def apply_once(self, key: str, instance_id: str, step: str) -> None:
        self._conn().execute(
            "INSERT INTO effects (key, instance_id, step) VALUES (?, ?, ?) "
            "ON CONFLICT (key) DO NOTHING",
            (key, instance_id, step),
        )

    def effects(self) -> list[tuple[str, str, str]]:
        rows = self._conn().execute("SELECT key, instance_id, step FROM effects").fetchall()
        return [(str(k), str(i), str(s)) for k, i, s in rows]

    def runs(self) -> Counter[tuple[str, str]]:
        rows = self._conn().execute("SELECT instance_id, step FROM runs").fetchall()
        return Counter((str(i), str(s)) for i, s in rows)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class PostgresLedger:
    """The ledger as two tables in the test's own schema (one connection per thread)."""

    def __init__(self, dsn: str, schema: str) -> None:
        from psycopg import sql

        self.dsn = dsn
        self.schema = schema
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()
        conn = self._conn()
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS crash_effects "
            "(key text PRIMARY KEY, instance_id text NOT NULL, step text NOT NULL)"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS crash_runs (id bigserial PRIMARY KEY, "
            "instance_id text NOT NULL, step text NOT NULL, attempt integer, pid integer)"
        )

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            import psycopg

            conn = psycopg.connect(
                self.dsn, autocommit=True, options=f"-c search_path={self.schema}"
            )
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def record_run(self, instance_id: str, step: str, attempt: int) -> None:
        self._conn().execute(
            "INSERT INTO crash_runs (instance_id, step, attempt, pid) VALUES (%s, %s, %s, %s)",
            (instance_id, step, attempt, os.getpid()),
        )

    def apply_once(self, key: str, instance_id: str, step: str) -> None:
        self._conn().execute(
            "INSERT INTO crash_effects (key, instance_id, step) VALUES (%s, %s, %s) "
            "ON CONFLICT (key) DO NOTHING",
            (key, instance_id, step),
        )

    def effects(self) -> list[tuple[str, str, str]]:
        rows = self._conn().execute("SELECT key, instance_id, step FROM crash_effects").fetchall()
        return [(str(k), str(i), str(s)) for k, i, s in rows]

    def runs(self) -> Counter[tuple[str, str]]:
        rows = self._conn().execute("SELECT instance_id, step FROM crash_runs").fetchall()
        return Counter((str(i), str(s)) for i, s in rows)

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()


def open_ledger(spec: str) -> Ledger:
    """``sqlite:<path>`` or ``postgres:<dsn>|<schema>``."""
    kind, _, rest = spec.partition(":")
    if kind == "sqlite":
        return SQLiteLedger(rest)
    if kind == "postgres":
        dsn, _, schema = rest.rpartition("|")
        return PostgresLedger(dsn, schema)
    raise ValueError(f"unknown ledger spec {spec!r}")


class Chaos:
    """Kills this process inside an action when told: ``<point>:<k>``.

    ``point`` is ``after_save`` (the identity is durable, the side effect not yet done)
    or ``after_effect`` (the side effect is done, the action has not returned); ``k``
    counts action executions in this process that reach that point.
    """

    def __init__(self, spec: str | None) -> None:
        self.point: str | None = None
        self.at = 0
        if spec:
            point, _, k = spec.rpartition(":")
            self.point, self.at = point, int(k)
        self._seen = 0
        self._lock = threading.Lock()

    def reach(self, point: str) -> None:
        if point != self.point:
            return
        with self._lock:
            self._seen += 1
            if self._seen == self.at:
                signal.pthread_kill(threading.get_ident(), signal.SIGKILL)


class CrashInput(BaseModel):
    n: int
    delay: float = 0.0
    """Seconds each action sleeps after its side effect (to keep steps in flight)."""


class CrashProgress(BaseModel):
    key_first: str | None = None
    key_second: str | None = None
    key_third: str | None = None


class Ledgered(Workflow[CrashInput, CrashProgress]):
    """Three steps, each with one idempotent side effect in the external ledger."""

    workflow_type = "crashtest.ledgered.v1"
    ledger: Ledger
    chaos: Chaos

    @step(initial=True, to="second")
    def first(self, ctx: StepContext[CrashInput, CrashProgress]) -> None:
        self._effect(ctx)

    @step(to="third")
    def second(self, ctx: StepContext[CrashInput, CrashProgress]) -> None:
        self._effect(ctx)

    @step(to=COMPLETED)
    def third(self, ctx: StepContext[CrashInput, CrashProgress]) -> None:
        self._effect(ctx)

    def _effect(self, ctx: StepContext[CrashInput, CrashProgress]) -> None:
        self.ledger.record_run(ctx.instance_id, ctx.step, ctx.attempt)
        field = KEY_FIELD[ctx.step]
        key = getattr(ctx.progress, field)
        if key is None:
            key = uuid.uuid4().hex
            ctx.save(**{field: key})  # the identity is durable before the side effect
        self.chaos.reach("after_save")
        self.ledger.apply_once(key, ctx.instance_id, ctx.step)
        self.chaos.reach("after_effect")
        if ctx.input.delay:
            time.sleep(ctx.input.delay)
