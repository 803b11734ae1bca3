"""The statements a SQLite store's write connection runs, as SQLite's trace shows them
(each with its parameters written in)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from statemachine_wf.stores.sqlite import SQLiteStore


@contextmanager
def traced(store: SQLiteStore) -> Iterator[list[str]]:
    """The statements the store's write connection runs meanwhile."""
    seen: list[str] = []
    conn = store._writing()
    conn.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)
