"""The PostgreSQL store's statements, prepared on a connection at their first call.

Prepared once and planned once, generically (docs/architecture.md, "Statements planned
once per connection"). A prepared statement is bound to the columns its tables had when it
was prepared: once another process's migration adds a column to a table it reads with
``*`` (``SELECT *``, ``RETURNING t.*``), PostgreSQL refuses it on every later call,
"cached plan must not change result type", until it is prepared again. A runner of the old
version, still running through a rolling upgrade, failed every such statement until its
pooled connection was replaced. A statement chosen as a deadlock's victim is likewise run
once more here, where it was alone, rather than failing its caller.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.pq import TransactionStatus


def run_prepared(
    conn: psycopg.Connection[Any], text: bytes, args: list[Any]
) -> psycopg.Cursor[Any]:
    """Run ``text`` (``$n`` placeholders) with ``args`` as a statement prepared on ``conn``.

    Alone (autocommit), a statement the server refused as stale is prepared again and
    run once more, and so is one it chose as a deadlock's victim: either way it was rolled
    back whole, and nothing of it (its NOTIFY included) was sent out. A second refusal is
    raised. Inside a transaction the error has aborted the caller's transaction, which
    fails and is retried whole by its caller.
    """
    try:
        return _run(conn, text, args)
    except (psycopg.errors.FeatureNotSupported, psycopg.errors.DeadlockDetected) as exc:
        # Told by their SQLSTATEs (0A000, 40P01), not their text, which follows the
        # server's lc_messages: another refusal of the first class fails again on the
        # retry, and is raised then. In a transaction psycopg, rolling it back, drops
        # every statement it prepared.
        if conn.info.transaction_status != TransactionStatus.IDLE:
            raise
        stale = isinstance(exc, psycopg.errors.FeatureNotSupported)
    if stale:
        # Drop them here (psycopg, seeing the command go through, forgets its own names
        # of them) and run this one again, prepared afresh.
        conn.execute("DEALLOCATE ALL", prepare=False)
    # A deadlock's victim runs again as it is: the other transaction of the cycle holds
    # its rows until it ends, and this one then waits for them, as it would have without
    # the cycle (two groups of a runner's steps, say: an aborted group hands every step it
    # carried back to be run again).
    return _run(conn, text, args)


def _run(conn: psycopg.Connection[Any], text: bytes, args: list[Any]) -> psycopg.Cursor[Any]:
    return psycopg.RawCursor(conn, row_factory=conn.row_factory).execute(text, args, prepare=True)
