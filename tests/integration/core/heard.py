"""What a PostgreSQL schema's channel carries, read off a LISTEN connection of the test's
own, as another runner process would hear it (test_start_kept_local.py,
test_streak_tells_nobody.py).

After each call's writes the test sends a marker notification on a channel of its own
(the store's listener would wake a worker for it), and a connection that listens on both
receives them in commit order, so whatever the writes sent arrives before the marker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql

from statemachine_wf.stores.postgres import PostgresStore


@contextmanager
def heard_on(store: PostgresStore, dsn: str) -> Iterator[Callable[[], list[str]]]:
    """A function answering what ``store``'s channel carried since its last call."""
    listener = psycopg.connect(dsn, autocommit=True)
    sender = psycopg.connect(dsn, autocommit=True)
    listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(store.channel)))
    markers = f"{store.channel}_marker"
    listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(markers)))

    def drain() -> list[str]:
        marker = uuid.uuid4().hex
        sender.execute("SELECT pg_notify(%s, %s)", (markers, marker))
        payloads: list[str] = []
        deadline = time.monotonic() + 30
        for note in listener.notifies(timeout=30):
            if note.payload == marker:
                return payloads
            payloads.append(note.payload)
            assert time.monotonic() < deadline
        raise AssertionError("the marker notification never arrived")

    try:
        drain()
        yield drain
    finally:
        listener.close()
        sender.close()
