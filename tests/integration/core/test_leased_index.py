"""A runner's own leases are found through wf_tasks_leased (migration 019), never by reading
every task: a heartbeat runs every third of the lease, and on SQLite it is a write that
every writer of every process waits for (5.5 ms at 100,000 tasks before the index:
bench/README.md, "The heartbeat's read of every task"). The backlog here is due tasks and
parked waits, which a bound on the due time does not skip."""

from __future__ import annotations

import re
import sqlite3
import time
from typing import Any

import psycopg
import pytest

from statemachine_wf.stores._sql import queries
from statemachine_wf.stores._sqliteconn import _SCRIPTS
from statemachine_wf.stores.postgres import PostgresStore
from statemachine_wf.stores.sqlite import SQLiteStore

BACKLOG = 20_000
LEASED_BY_A = 3
LEASED_BY_B = 2
# The statements that pick a runner's tasks by lease_owner.
BY_OWNER = ("heartbeat", "heartbeat_logged", "release", "release_all", "lease_incarnations")


def _fill_sqlite(path: str) -> None:
    """BACKLOG instances with a task each: every third parked an hour ahead, the rest due;
    the first few leased by runners "a" and "b" (incarnation "inc")."""
    now = time.time()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)"
            " INSERT INTO wf_instances (id, type, status, step, input, created_at, updated_at)"
            " SELECT printf('i%06d', n), 'mine.v1', 'PENDING', 'go', '{}', ?, ? FROM g",
            (BACKLOG, now, now),
        )
        conn.execute(
            "INSERT INTO wf_tasks (instance_id, node, type, due_at, created_at)"
            " SELECT id, 'go', type,"
            "  CASE WHEN rowid % 3 = 0 THEN ? + 3600 ELSE ? - 1 END, ?"
            " FROM wf_instances ORDER BY rowid",
            (now, now, now),
        )
        conn.execute(
            "UPDATE wf_tasks SET lease_owner = CASE WHEN id <= ? THEN 'a' ELSE 'b' END,"
            " lease_token = 'inc/' || id, due_at = ? + 60 WHERE id <= ?",
            (LEASED_BY_A, now, LEASED_BY_A + LEASED_BY_B),
        )
    conn.close()


def test_sqlite_heartbeat_extends_its_own_leases_off_the_leased_index(
    sqlite_store: SQLiteStore, sqlite_path: str
) -> None:
    _fill_sqlite(sqlite_path)
    conn = sqlite3.connect(sqlite_path)
    params: dict[str, Any] = {
        "now": time.time(), "worker": "a", "lease": 600.0, "mine": "inc/", "every": 30.0,
        "payload": "{}", "ids": '["i000001"]', "token": None, "unrun": True,
    }  # fmt: skip
    for name in BY_OWNER:
        for statement, _guard, _sets in _SCRIPTS[name]:
            plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + statement, params)]
            text = f"{name}: {statement}\n" + "\n".join(plan)
            # A full read of wf_tasks shows as "SCAN wf_tasks" (with no index after it).
            assert not any(re.fullmatch(r"SCAN wf_tasks", p) for p in plan), text
            if "lease_owner = :worker" in statement and "instance_id IN" not in statement:
                assert any("wf_tasks_leased (lease_owner=?)" in p for p in plan), text

    before = time.time()
    assert sqlite_store.heartbeat(worker="a", lease=600.0, incarnation="inc") == LEASED_BY_A
    assert sqlite_store.heartbeat(worker="a", lease=600.0, log_every=30.0) == LEASED_BY_A
    rows = conn.execute(
        "SELECT lease_owner, due_at FROM wf_tasks WHERE lease_owner IS NOT NULL ORDER BY id"
    ).fetchall()
    assert [owner for owner, _ in rows] == ["a"] * LEASED_BY_A + ["b"] * LEASED_BY_B
    assert all(due >= before + 600 for owner, due in rows if owner == "a"), rows
    assert all(due < before + 120 for owner, due in rows if owner == "b"), rows
    # A hand-back of everything "b" holds frees exactly those, and the index forgets them.
    sqlite_store.release(worker="b")
    assert conn.execute("SELECT count(*) FROM wf_tasks WHERE lease_owner = 'b'").fetchone() == (0,)
    conn.close()


@pytest.mark.postgres
def test_postgres_heartbeat_extends_its_own_leases_off_the_leased_index(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={pg_schema}") as c:
        c.execute(
            "INSERT INTO wf_instances (id, type, kind, status, step, input)"
            " SELECT gen_random_uuid(), 'mine.v1', 'machine', 'PENDING', 'go', '{}'"
            " FROM generate_series(1, %s)",
            [BACKLOG],
        )
        c.execute(
            "INSERT INTO wf_tasks (instance_id, slot, node, kind, type, due_at)"
            " SELECT id, '', 'go', kind, type,"
            "  CASE WHEN abs(hashtext(id::text)) % 3 = 0 THEN now() + interval '1 hour'"
            "       ELSE now() - interval '1 second' END"
            " FROM wf_instances"
        )
        c.execute(
            "UPDATE wf_tasks SET lease_owner = CASE WHEN id <= %s THEN 'a' ELSE 'b' END,"
            " lease_token = 'inc/' || id, due_at = now() + interval '1 minute' WHERE id <= %s",
            [LEASED_BY_A, LEASED_BY_A + LEASED_BY_B],
        )
        pages = c.execute("SELECT pg_relation_size('wf_tasks') / 8192").fetchone()
        assert pages is not None
        assert pages[0] > 200  # so reading the table would show
        params: dict[str, Any] = {
            "worker": "a", "lease": 600.0, "mine": "inc/", "every": 30.0, "token": None,
            "ids": [], "channel": "swf_test_leases", "live": "swf_test_live", "unrun": True,
        }  # fmt: skip
        for analyzed in (False, True):
            if analyzed:
                c.execute("ANALYZE wf_tasks")
            for name in BY_OWNER:
                with c.transaction(force_rollback=True):
                    plan = "\n".join(
                        r[0]
                        for r in c.execute(
                            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + queries("postgres")[name],
                            params,
                        ).fetchall()
                    )
                what = f"{name} analyzed={analyzed}\n{plan}"
                assert "Seq Scan on wf_tasks" not in plan, what
                if name != "release":  # by instance ids: the unique key serves it
                    assert "wf_tasks_leased" in plan, what
                top = plan.split("Planning")[0]
                hits = max((int(n) for n in re.findall(r"shared hit=(\d+)", top)), default=0)
                # The three leases' rows and their index entries (an update writes a new
                # entry into each of wf_tasks' indexes), not the table's 200+ pages.
                assert hits < 100, f"{hits} pages read: {what}"

        before = c.execute("SELECT extract(epoch FROM now())::float8").fetchone()
        assert before is not None
        assert pg_store.heartbeat(worker="a", lease=600.0, incarnation="inc") == LEASED_BY_A
        assert pg_store.heartbeat(worker="a", lease=600.0, log_every=30.0) == LEASED_BY_A
        rows = c.execute(
            "SELECT lease_owner, extract(epoch FROM due_at)::float8 FROM wf_tasks"
            " WHERE lease_owner IS NOT NULL ORDER BY id"
        ).fetchall()
        assert [owner for owner, _ in rows] == ["a"] * LEASED_BY_A + ["b"] * LEASED_BY_B
        assert all(due >= before[0] + 600 for owner, due in rows if owner == "a"), rows
        assert all(due < before[0] + 120 for owner, due in rows if owner == "b"), rows
        pg_store.release(worker="b")
        assert c.execute("SELECT count(*) FROM wf_tasks WHERE lease_owner = 'b'").fetchone() == (0,)
