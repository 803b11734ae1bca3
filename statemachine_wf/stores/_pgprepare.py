"""The PostgreSQL store's statements, prepared on a connection at their first call.

Prepared once and planned once, generically (docs/architecture.md, "Statements planned
once per connection"). A prepared statement is bound to the columns its tables had when it
was prepared: once another process's migration adds a column to a table it reads with
``*`` (``SELECT *``, ``RETURNING t.*``), PostgreSQL refuses it on every later call,
"cached plan must not change result type", until it is prepared again. A runner of the old
version, still running through a rolling upgrade, failed every such statement until its
pooled connection was replaced.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.pq import TransactionStatus


def run_prepared(
    conn: psycopg.Connection[Any], text: bytes, args: list[Any]
) -> psycopg.Cursor[Any]:
    """Run ``text`` (``$n`` placeholders) with ``args`` as a statement prepared on ``conn``."""
    try:
        return _run(conn, text, args)
    except psycopg.errors.FeatureNotSupported:
        # Told by its SQLSTATE (0A000), not its text, which follows the server's
        # lc_messages: another refusal of that class fails again on the retry, and is
        # raised then. In a transaction the error has aborted it: the caller's transaction
        # fails and is retried whole, and psycopg, rolling it back, drops every statement
        # it prepared.
        if conn.info.transaction_status != TransactionStatus.IDLE:
            raise
    # Alone (autocommit): drop them here (psycopg, seeing the command go through, forgets
    # its own names of them) and run this one again, prepared afresh.
    conn.execute("DEALLOCATE ALL", prepare=False)
    return _run(conn, text, args)


def _run(conn: psycopg.Connection[Any], text: bytes, args: list[Any]) -> psycopg.Cursor[Any]:
    return psycopg.RawCursor(conn, row_factory=conn.row_factory).execute(text, args, prepare=True)
