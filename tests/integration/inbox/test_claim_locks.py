"""PostgreSQL: a claim locks only the tasks it takes, and reaches each candidate by its
key however small the table (the claim's `picked`)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from statemachine_wf.stores._sql import queries
from tests.plugins.stores import PG_DSN


def _picks() -> str:
    """The claim's candidates and what it locks: its CTEs up to `picked`, then their ids."""
    found = re.search(r"WITH (.*?), prev AS \(", queries("postgres")["claim"], re.S)
    assert found is not None
    return f"WITH {found.group(1)} SELECT id FROM picked"


def _fill(conn: Any, n: int) -> None:
    conn.execute(
        "INSERT INTO wf_instances (id, type, kind, status, step, input)"
        " SELECT gen_random_uuid(), 'mine.v1', 'machine', 'PENDING', 'go', '{}'"
        " FROM generate_series(1, %s)",
        (n,),
    )
    conn.execute(
        "INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at)"
        " SELECT id, '', 'go', kind, type, 100, now() - interval '1 second' FROM wf_instances"
    )


@pytest.mark.postgres
def test_a_claim_locks_the_tasks_it_takes_and_no_other_candidate(pg_schema: str) -> None:
    """20 due tasks, a claim of 1 left open: a racing claim finds the other 19 free. A plan
    that sorted after fetching would lock all 17 candidates and starve the racing claims."""
    import psycopg

    from statemachine_wf.stores.postgres import PostgresStore

    store = PostgresStore(PG_DSN, schema=pg_schema)
    store.migrate()
    store.close()
    options = f"-c search_path={pg_schema}"
    with (
        psycopg.connect(PG_DSN, options=options) as mine,
        psycopg.connect(PG_DSN, autocommit=True, options=options) as other,
    ):
        _fill(mine, 20)
        mine.commit()
        for limit in (1, 3):
            taken = mine.execute(_picks(), {"types": ["mine.v1"], "limit": limit}).fetchall()
            assert len(taken) == limit
            free = other.execute(
                "SELECT count(*) FROM (SELECT id FROM wf_tasks FOR UPDATE SKIP LOCKED) AS f"
            ).fetchone()
            assert free is not None
            assert free[0] == 20 - limit
            mine.rollback()


@pytest.mark.postgres
def test_the_claim_fetches_candidates_by_key_in_a_small_table(pg_schema: str) -> None:
    """2,000 due tasks, no statistics and then with them: the candidates are fetched by
    the primary key, never by a scan of wf_tasks (which cost 0.4 of a 0.9 ms claim)."""
    import psycopg

    from statemachine_wf.stores.postgres import PostgresStore

    store = PostgresStore(PG_DSN, schema=pg_schema)
    store.migrate()
    store.close()
    with psycopg.connect(PG_DSN, autocommit=True, options=f"-c search_path={pg_schema}") as c:
        _fill(c, 2000)
        for analyzed in (False, True):
            if analyzed:
                c.execute("ANALYZE wf_tasks")
            rows = c.execute(
                "EXPLAIN (COSTS OFF) " + _picks(), {"types": ["mine.v1"], "limit": 1}
            ).fetchall()
            plan = "\n".join(r[0] for r in rows)
            assert "Seq Scan on wf_tasks" not in plan, f"analyzed={analyzed}\n{plan}"
            assert "Index Scan using wf_tasks_pkey" in plan, f"analyzed={analyzed}\n{plan}"
