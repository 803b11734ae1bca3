"""A heartbeat never waits for a row lock (PostgreSQL).

A heartbeat locks many of its runner's task rows, in the order of the index it walks; a
group commit locks several of them, in the order of its batch. When the heartbeat waited
for a row it found locked, the two could each wait for the other's rows: the server
aborted one after ``deadlock_timeout``, and an aborted group handed every step it carried
back to be run again (CI saw 11 reruns where at most 8 steps were in flight). Now the
heartbeat skips a row somebody holds: that row's lease is renewed or ended by the commit
that holds it, or taken over by another runner's claim, and the next beat finds it free.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from statemachine_wf.stores.postgres import PostgresStore
from tests.contract.helpers import started


@pytest.mark.parametrize("log_every", [None, 0.0])
def test_a_heartbeat_skips_a_task_row_another_transaction_holds(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str, log_every: float | None
) -> None:
    claims = [started(pg_store, worker="w") for _ in range(3)]
    held, free = claims[0].instance.id, [c.instance.id for c in claims[1:]]
    pg_store.heartbeat(worker="w", lease=300, log_every=log_every)  # a first sighting
    before = _due(pg_dsn, pg_schema)

    outcome: list[Any] = []
    with psycopg.connect(pg_dsn, options=f"-c search_path={pg_schema}") as holder:
        # A transaction that holds one of w's task rows, as a commit of its step would.
        holder.execute("SELECT 1 FROM wf_tasks WHERE instance_id = %s FOR UPDATE", (held,))
        beat = threading.Thread(
            target=lambda: outcome.append(
                pg_store.heartbeat(worker="w", lease=600, log_every=log_every)
            ),
            daemon=True,
        )
        beat.start()
        beat.join(30)  # it would wait for as long as the row is held: until rollback
        waited = beat.is_alive()
        holder.rollback()
    beat.join(30)
    assert not waited, "the heartbeat waited for a row lock"
    assert outcome == [2]
    after = _due(pg_dsn, pg_schema)
    assert after[held] == before[held]  # skipped: the next beat extends it
    assert all(after[i] > before[i] for i in free)
    assert pg_store.heartbeat(worker="w", lease=900, log_every=log_every) == 3
    assert _due(pg_dsn, pg_schema)[held] > before[held]


def _due(dsn: str, schema: str) -> dict[str, Any]:
    with psycopg.connect(dsn, options=f"-c search_path={schema}") as conn:
        rows = conn.execute("SELECT instance_id::text, due_at FROM wf_tasks").fetchall()
    return {str(i): d for i, d in rows}
