"""The DAG claim on SQLite: among due node tasks of one priority, an instance that no
runner holds a lease on comes first. Every commit on an instance is a CAS on its version,
so workers of several processes on one fan-out kept losing it to each other (about two
lost CASes a node with four processes: bench/README.md, "DAG claims: an idle instance
first"). Priority still comes before that, and due time after it."""

from __future__ import annotations

import sqlite3

from statemachine_wf.stores.sqlite import SQLiteStore
from tests.contract import test_dag_siblings as fan


def _fanned_out(store: SQLiteStore) -> tuple[str, str]:
    """Two fan-out instances whose start nodes have run, the first's first: each has
    three branches due, the first's due earlier."""
    first, second = fan.start(store), fan.start(store)
    roots = [fan.claim(store, "starter"), fan.claim(store, "starter")]
    assert [(r.task.instance_id, r.task.slot) for r in roots] == [(first, "s"), (second, "s")]
    for root in roots:
        store.dag_commit(fan.completion(store, root, {"x": 1}))
    return first, second


def test_a_claim_takes_an_idle_instances_branch_before_a_busy_ones(
    sqlite_store: SQLiteStore,
) -> None:
    busy, idle = _fanned_out(sqlite_store)
    # The first instance's branches were due first, so the first claim takes one of them.
    assert fan.claim(sqlite_store, "w1").task.instance_id == busy
    # A worker there holds a lease: the next claim takes the other instance's branch,
    # due later.
    assert fan.claim(sqlite_store, "w2").task.instance_id == idle
    # Both busy now: due time decides again.
    assert fan.claim(sqlite_store, "w3").task.instance_id == busy
    assert fan.claim(sqlite_store, "w4").task.instance_id == busy  # its last branch
    assert fan.claim(sqlite_store, "w5").task.instance_id == idle


def test_an_idle_instance_further_down_than_the_first_window_is_found(
    sqlite_store: SQLiteStore, sqlite_path: str
) -> None:
    """The pick reads :limit + 128 tasks down the index and ranks them, and looks further
    (up to 1,024 tasks) for the first of an instance nobody holds: ten instances of a
    hundred branches each hid all but the first two, and the workers of four processes
    converged on those (bench/README.md, "Session 47")."""
    busy, idle = _fanned_out(sqlite_store)
    conn = sqlite3.connect(sqlite_path)
    with conn:  # two hundred more branches of the busy instance, due before any other
        row = conn.execute(
            "SELECT type, priority FROM wf_tasks WHERE instance_id = ? LIMIT 1", (busy,)
        ).fetchone()
        conn.executemany(
            "INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at,"
            " attempt, created_at) VALUES (?, ?, 'b', 'dag', ?, ?, ?, 0, 0)",
            [(busy, f"extra{i}", row[0], row[1], float(i)) for i in range(200)],
        )
    conn.close()
    first = fan.claim(sqlite_store, "w1")
    assert (first.task.instance_id, first.task.slot) == (busy, "extra0")
    # 202 of the busy instance's tasks are due before the idle instance's first branch.
    assert fan.claim(sqlite_store, "w2").task.instance_id == idle
    # Both held: due time decides again, the busy instance's next extra branch first.
    third = fan.claim(sqlite_store, "w3")
    assert (third.task.instance_id, third.task.slot) == (busy, "extra1")


def test_priority_still_comes_before_an_idle_instance(
    sqlite_store: SQLiteStore, sqlite_path: str
) -> None:
    busy, idle = _fanned_out(sqlite_store)
    conn = sqlite3.connect(sqlite_path)
    with conn:  # the idle instance's branches are of a lower priority (a higher number)
        conn.execute("UPDATE wf_tasks SET priority = 200 WHERE instance_id = ?", (idle,))
    conn.close()
    assert fan.claim(sqlite_store, "w1").task.instance_id == busy
    assert fan.claim(sqlite_store, "w2").task.instance_id == busy
    assert fan.claim(sqlite_store, "w3").task.instance_id == busy
    assert fan.claim(sqlite_store, "w4").task.instance_id == idle


def test_a_lapsed_lease_leaves_its_instance_idle(
    sqlite_store: SQLiteStore, sqlite_path: str
) -> None:
    busy, _idle = _fanned_out(sqlite_store)
    held = fan.claim(sqlite_store, "w1")
    assert held.task.instance_id == busy
    conn = sqlite3.connect(sqlite_path)
    with conn:  # the lease ran out (its runner died): the task is due again, first
        conn.execute("UPDATE wf_tasks SET due_at = 0 WHERE id = ?", (held.task.id,))
    conn.close()
    again = fan.claim(sqlite_store, "w2")
    assert (again.task.instance_id, again.task.slot) == (busy, held.task.slot)


def test_the_idle_check_reads_the_leased_index_only(
    sqlite_store: SQLiteStore, sqlite_path: str
) -> None:
    """The held instances are read once per claim from the leased tasks (wf_tasks_leased,
    a few a worker), not probed for each of the pick's candidates (it scanned every lease
    for each: 1.5 ms a claim with 300 held), nor in an instance's own tasks (a fan-out's
    hundred)."""
    import json
    import time

    from statemachine_wf.stores._sqliteconn import _SCRIPTS

    pick = _SCRIPTS["dag_claim"][0][0]
    params = {
        "now": time.time(), "types": json.dumps(["a.v1", "b.v1"]), "limit": 1, "worker": "w",
        "token": "t", "lease": 60.0,
    }  # fmt: skip
    conn = sqlite3.connect(sqlite_path)
    plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + pick, params)]
    conn.close()
    text = "\n".join(plan)
    assert "SEARCH s USING INDEX wf_tasks_leased (lease_owner>?)" in plan, text
    assert not any(p.startswith("CORRELATED SCALAR") for p in plan), text  # once, not per row
    assert "SEARCH w USING INDEX wf_tasks_type_pick (type=?)" in plan, text
    assert "SEARCH v USING INDEX wf_tasks_type_pick (type=?)" in plan, text
    # Scans only of the types' list, the held list and the two walks' bounded co-routines.
    scanned = {p for p in plan if p.startswith("SCAN")}
    assert scanned <= {"SCAN j VIRTUAL TABLE INDEX 1:", "SCAN held", "SCAN f"} | {
        p for p in scanned if p.startswith("SCAN (subquery-")
    }, text
    assert plan.count("MATERIALIZE held") == 1, text
