"""The DAG claim's pick on PostgreSQL (``swf_dag_pick``, migration 018): an instance whose
row is held is passed over with none of its task rows locked, so a commit holding that row
can still take one of them for its worker (the sibling take's ``SKIP LOCKED``); the walk
goes on past busy instances to a free one's tasks, those of the busy one's due time
included; with several types the best tasks of them all are taken."""

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


def _pick(conn: psycopg.Connection[tuple[object, ...]], types: list[str], n: int) -> list[str]:
    """The (instance, slot) of each task ``swf_dag_pick`` takes, in its order; the pick's
    locks are kept (the caller's transaction)."""
    rows: list[str] = []
    ids = [r[0] for r in conn.execute("SELECT id FROM swf_dag_pick(%s, %s)", (types, n))]
    for task_id in ids:
        row = conn.execute(
            "SELECT instance_id::text, slot FROM wf_tasks WHERE id = %s", (task_id,)
        ).fetchone()
        assert row is not None
        rows.append(f"{row[0]}/{row[1]}")
    return rows


def test_a_pick_goes_on_past_busy_instances_to_a_free_ones_branches(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    """Three fan-outs whose branches fell due in turn; the first two held by commits: the
    pick takes the third's branches (two, in one call), and none of the busy ones'."""
    iids = [fan.start(pg_store) for _ in range(3)]
    for _ in iids:  # each start node run: three branches due a fan-out, the first's first
        pg_store.dag_commit(fan.completion(pg_store, fan.claim(pg_store), {"x": 1}))
    commits = [_connect(pg_dsn, pg_schema) for _ in range(2)]
    claim, third = _connect(pg_dsn, pg_schema), _connect(pg_dsn, pg_schema)
    try:
        for conn, iid in zip(commits, iids[:2], strict=True):
            conn.execute("UPDATE wf_instances SET updated_at = updated_at WHERE id = %s", (iid,))
        picked = _pick(claim, [fan.FAN.type], 2)
        assert len(picked) == 2
        assert {p.split("/")[0] for p in picked} == {iids[2]}
        for iid in iids[:2]:
            assert _free_branches(third, iid) == ["b0", "b1", "b2"]
        claim.rollback()
        commits[0].rollback()  # the first instance free again: its branches come first
        picked = _pick(claim, [fan.FAN.type], 4)
        assert [p.split("/")[0] for p in picked] == [iids[0]] * 3 + [iids[2]]
        claim.rollback()
    finally:
        for conn in (*commits, claim, third):
            conn.rollback()
            conn.close()


def test_a_pick_of_several_types_takes_the_best_of_them_all(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    """Two types' due node tasks: the pick returns the n first by priority, then due time,
    whichever type each is of."""
    iid = fan.start(pg_store)
    pg_store.dag_commit(fan.completion(pg_store, fan.claim(pg_store), {"x": 1}))
    conn = _connect(pg_dsn, pg_schema)
    try:
        # b1 becomes another type's, the most urgent task; b2 the same type's, the least.
        conn.execute(
            "UPDATE wf_tasks SET type = 'other', priority = 0 WHERE instance_id = %s"
            " AND slot = 'b1'",
            (iid,),
        )
        conn.execute(
            "UPDATE wf_tasks SET due_at = now() - interval '1 second' WHERE instance_id = %s"
            " AND slot = 'b0'",
            (iid,),
        )
        conn.commit()
        picked = _pick(conn, [fan.FAN.type, "other"], 2)
        assert picked == [f"{iid}/b1", f"{iid}/b0"]
        conn.rollback()
        assert _pick(conn, ["other"], 5) == [f"{iid}/b1"]
        conn.rollback()
    finally:
        conn.close()


def test_a_pick_takes_another_instances_task_of_the_busy_ones_due_time(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    """Another instance's tasks due at the very same time as a busy instance's (a batch of
    starts in one transaction shares it) are taken: a pick that skipped past a busy
    instance's due time would miss them (session 50 measured such a pick, not kept)."""
    started = [fan.start(pg_store), fan.start(pg_store)]
    for _ in started:
        pg_store.dag_commit(fan.completion(pg_store, fan.claim(pg_store), {"x": 1}))
    # The busy one first in the index, so that the walk meets it first.
    busy, other = sorted(started)
    commit, claim = _connect(pg_dsn, pg_schema), _connect(pg_dsn, pg_schema)
    try:
        # One due time for all six branches.
        commit.execute(
            "UPDATE wf_tasks SET due_at = now() - interval '1 minute'"
            " WHERE instance_id IN (%s, %s)",
            (busy, other),
        )
        commit.commit()
        commit.execute("UPDATE wf_instances SET updated_at = updated_at WHERE id = %s", (busy,))
        picked = _pick(claim, [fan.FAN.type], 3)
        assert sorted(picked) == [f"{other}/b0", f"{other}/b1", f"{other}/b2"]
        claim.rollback()
    finally:
        for conn in (commit, claim):
            conn.rollback()
            conn.close()
