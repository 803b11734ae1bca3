"""Row locks held from a second connection, for the tests that put a statement of the
store in a lock queue (test_wake_lock_order.py, test_deadlock_victim.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


@contextmanager
def connect(dsn: str, schema: str) -> Iterator[psycopg.Connection]:
    """A connection of its own on the test's schema (not the store's pool)."""
    with psycopg.connect(dsn, options=f"-c search_path={schema}") as conn:
        yield conn


def blocked_by(dsn: str, schema: str, holder_pid: int, timeout: float = 20.0) -> bool:
    """Has a backend begun to wait for a lock the backend ``holder_pid`` holds?"""
    deadline = time.monotonic() + timeout
    with connect(dsn, schema) as conn:
        conn.autocommit = True
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (holder_pid,),
            ).fetchone()
            if row is not None and row[0] > 0:
                return True
            time.sleep(0.02)
    return False
