"""The DAG claim's pick on PostgreSQL (``swf_dag_pick``, migration 018): an instance whose
row is held is passed over with none of its task rows locked, so a commit holding that row
can still take one of them for its worker (the sibling take's ``SKIP LOCKED``)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from statemachine_wf.stores.postgres import PostgresStore
from tests.contract import test_dag_siblings as fan

pytestmark = pytest.mark.postgres


def _connect(dsn: str, schema: str) -> psycopg.Connection[tuple[object, ...]]:
    conn = psycopg.connect(dsn)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    conn.commit()  # the session's setting, whatever the test's transactions do
    return conn


def _free_branches(conn: psycopg.Connection[tuple[object, ...]], iid: str) -> list[object]:
    rows = conn.execute(
        "SELECT slot FROM wf_tasks WHERE instance_id = %s AND due_at <= now() "
        "ORDER BY slot FOR UPDATE SKIP LOCKED",
        (iid,),
    ).fetchall()
    conn.rollback()
    return [r[0] for r in rows]


def test_a_pick_passes_a_busy_instance_without_locking_its_tasks(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    iid = fan.start(pg_store)
    pg_store.dag_commit(fan.completion(pg_store, fan.claim(pg_store), {"x": 1}))
    commit, claim, third = (_connect(pg_dsn, pg_schema) for _ in range(3))
    try:
        assert _free_branches(third, iid) == ["b0", "b1", "b2"]
        # A commit holds the instance row (its CAS) while an idle worker's claim runs.
        commit.execute("UPDATE wf_instances SET updated_at = updated_at WHERE id = %s", (iid,))
        picked = claim.execute("SELECT id FROM swf_dag_pick(%s, 1)", ([fan.FAN.type],))
        assert picked.fetchall() == []
        # The claim's transaction is still open: the task rows it passed over are free
        # (before 018 it held all three until its statement ended).
        assert _free_branches(third, iid) == ["b0", "b1", "b2"]
        claim.rollback()
        commit.rollback()
        # The instance free again, the pick takes a branch, its row and the instance's.
        [(task_id,)] = claim.execute(
            "SELECT id FROM swf_dag_pick(%s, 1)", ([fan.FAN.type],)
        ).fetchall()
        slot = claim.execute("SELECT slot FROM wf_tasks WHERE id = %s", (task_id,)).fetchone()
        assert slot is not None
        assert slot[0] not in _free_branches(third, iid)
        held = third.execute(
            "SELECT id FROM wf_instances WHERE id = %s FOR NO KEY UPDATE SKIP LOCKED", (iid,)
        ).fetchall()
        third.rollback()
        assert held == []
        claim.rollback()
    finally:
        for conn in (commit, claim, third):
            conn.close()
