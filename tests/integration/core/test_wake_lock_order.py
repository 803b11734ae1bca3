"""The statements that wake several lock waiters lock their task rows in one order (PostgreSQL).

A release of several keys (``release_locks``, or an instance's end in ``apply_finish``)
makes one waiter's task due per key: an UPDATE of several ``wf_tasks`` rows, each locked in
turn. Locked in whatever order the plan scans them, two such statements could each hold a
row the other waits for (an instance queued on two keys at once, released by two
holders): the server then aborts one of them after ``deadlock_timeout``. A group of ending
children wakes their parents' node tasks the same way, in the order of its batch, and
``wake_instances`` the tasks of the instances it names. They all lock the rows in the order
of their id first now.

The test holds the lower row, lets the statement run into it, and then asks for the
higher row without waiting: in id order the statement has not touched it yet. The higher
row is made to come first in a scan (its twin was updated, so it lies behind it), as the
plan of the old statements met it.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import psycopg
import pytest

from statemachine_wf.core import decide
from statemachine_wf.core.store import Commit, NewInstance
from statemachine_wf.stores.postgres import PostgresStore
from tests.contract import test_dag_runs as dag_runs
from tests.contract.helpers import TYPE, claim_one, started
from tests.integration.core.row_locks import blocked_by, connect
from tests.integration.core.test_store_contract import new


def _waiters(store: PostgresStore, dsn: str, schema: str, holder: str) -> tuple[str, str]:
    """Two parked waiters, the lower task id queued on k2, the higher on k1 and first.

    Whichever way a plan meets them (a scan of the table, the instance id's index, the
    waiters' order by key), it meets the higher task row first: its instance id is the
    lower one, its key comes first, and the lower row's version lies behind it.
    """
    low, high = _parked(store, "ffffffff"), _parked(store, "00000000")
    for key in ("k1", "k2"):
        assert store.acquire_lock(key, holder) == holder
    assert store.acquire_lock("k1", high) == holder
    assert store.acquire_lock("k2", low) == holder
    with connect(dsn, schema) as conn:
        # The lower row's new version lies behind the higher one: a scan meets high first.
        conn.execute("UPDATE wf_tasks SET due_at = due_at WHERE instance_id = %s", (low,))
        conn.commit()
    return low, high


def _parked(store: PostgresStore, prefix: str) -> str:
    """A new instance whose id begins with ``prefix``, due only when woken."""
    tail = uuid.uuid4().hex[8:]
    made = NewInstance(
        id=str(uuid.UUID(prefix + tail)), type=TYPE, input={"n": 1}, initial="first", delay=3600
    )
    instance_id, created = store.create(made)
    assert created
    return instance_id


def _run_into_held_row(
    dsn: str, schema: str, low: str, high: str, release: Callable[[], object]
) -> bool:
    """Run ``release`` while ``low``'s task row is held; could ``high``'s be taken meanwhile?"""
    outcome: list[object] = []
    with connect(dsn, schema) as holding:
        holding.execute("SELECT 1 FROM wf_tasks WHERE instance_id = %s FOR UPDATE", (low,))
        runner = threading.Thread(target=lambda: outcome.append(release()), daemon=True)
        runner.start()
        waiting = blocked_by(dsn, schema, holding.info.backend_pid)
        assert waiting, "the statement never waited for the held row"
        with connect(dsn, schema) as probe:
            try:
                probe.execute(
                    "SELECT 1 FROM wf_tasks WHERE instance_id = %s FOR UPDATE NOWAIT", (high,)
                )
                free = True
            except psycopg.errors.LockNotAvailable:
                free = False
            probe.rollback()
        holding.rollback()
    runner.join(30)
    assert not runner.is_alive()
    assert len(outcome) == 1
    return free


def _woken(dsn: str, schema: str, ids: tuple[str, str]) -> bool:
    with connect(dsn, schema) as conn:
        row = conn.execute(
            "SELECT bool_and(due_at <= now()) FROM wf_tasks WHERE instance_id = ANY(%s::uuid[])",
            (list(ids),),
        ).fetchone()
    return bool(row and row[0])


def test_a_release_locks_the_waiters_task_rows_in_id_order(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    holder = new(pg_store)
    low, high = _waiters(pg_store, pg_dsn, pg_schema, holder)
    free = _run_into_held_row(pg_dsn, pg_schema, low, high, lambda: pg_store.release_locks(holder))
    assert free, "the release locked the higher task row before the lower one"
    assert _woken(pg_dsn, pg_schema, (low, high))


@pytest.mark.parametrize("group", [False, True])
def test_an_ending_holder_locks_the_waiters_task_rows_in_id_order(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str, group: bool
) -> None:
    claim = started(pg_store)
    holder = claim.instance.id
    low, high = _waiters(pg_store, pg_dsn, pg_schema, holder)
    d = decide.cancel(claim.instance.projection(in_flight=True), leased=False)  # a Finish
    commit = Commit(holder, claim.instance.version, d, "w")

    def finish() -> object:
        if group:  # the same statement, run for a group of one (stores/_pggroup.py)
            return pg_store.apply_and_claim(commit, types=["x.none.v1"], lease=60)
        return pg_store.apply(commit)

    free = _run_into_held_row(pg_dsn, pg_schema, low, high, finish)
    assert free, "the finish locked the higher task row before the lower one"
    assert (pg_store.lock_holder("k1"), pg_store.lock_holder("k2")) == (None, None)
    assert _woken(pg_dsn, pg_schema, (low, high))


def test_a_group_of_ending_children_locks_their_parents_task_rows_in_id_order(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    # Two DAG parents, each waiting at its node "s" (a sub-workflow's node), and a child
    # of each; the group ends the higher parent's child first, as its batch came.
    low, high = dag_runs.start(pg_store)[0], dag_runs.start(pg_store)[0]
    with connect(pg_dsn, pg_schema) as conn:  # the lower parent's row behind the higher's
        conn.execute("UPDATE wf_tasks SET due_at = due_at WHERE instance_id = %s", (low,))
        conn.commit()
    ended = []
    for parent in (high, low):
        child = NewInstance(
            str(uuid.uuid4()), TYPE, {"n": 1}, "first", parent_id=parent, parent_node="s"
        )
        pg_store.create(child)
        claim = claim_one(pg_store)
        assert claim.instance.id == child.id
        d = decide.cancel(claim.instance.projection(in_flight=True), leased=False)
        ended.append(Commit(child.id, claim.instance.version, d, "w"))
    items = [pg_store._finish_item(c, (TYPE,), 300.0, "") for c in ended]

    def finish() -> object:
        outcomes = pg_store._send_finishes(items)
        assert not any(isinstance(o, BaseException) for o in outcomes), outcomes
        return outcomes

    free = _run_into_held_row(pg_dsn, pg_schema, low, high, finish)
    assert free, "the group locked the higher parent's task row before the lower one"
    assert _woken(pg_dsn, pg_schema, (low, high))


def test_waking_several_instances_locks_their_task_rows_in_id_order(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    # wake_instances (a back-off or a snooze over, several instances named at once) updates
    # their task rows in one statement, as a release does. Among fifty other parked tasks,
    # with statistics, the plan finds the named rows by the instance id's index, so it meets
    # the higher row (the lower instance id) first; on two rows alone it scans the table,
    # and the unordered statement happened to meet the lower row first (checked both ways).
    low, high = _parked(pg_store, "ffffffff"), _parked(pg_store, "00000000")
    for _ in range(50):
        _parked(pg_store, "88888888")
    with connect(pg_dsn, pg_schema) as conn:
        conn.execute("ANALYZE wf_tasks")
        conn.commit()
    free = _run_into_held_row(
        pg_dsn, pg_schema, low, high, lambda: pg_store.wake_instances([high, low])
    )
    assert free, "the wake locked the higher task row before the lower one"
    assert _woken(pg_dsn, pg_schema, (low, high))
