"""PostgreSQL: a start leased to a runner of another process with a worker asleep.

Each store object stands for a process here: its own LISTEN connection, channel and
advisory lock. A start due now that no worker of its own store object takes looks in
``wf_idle_runners`` (migration 023) for a runner of its type with a worker asleep, leases
the task to that runner in its own commit (its first step started) and tells that
process alone; the runner runs it with no claim, or hands it back when none of its
workers sleeps any more and none looks within a moment (docs/architecture.md, "A start
leased to a runner of another process"). The SIGKILL case is in
``tests/integration/crash/test_crash_offered_start.py``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    Runner,
    RunnerOptions,
    Status,
    StepContext,
    Workflow,
    step,
)
from statemachine_wf.core.records import Claimant, NewInstance
from statemachine_wf.definition.events import Ev
from statemachine_wf.stores.postgres import PostgresStore
from tests.plugins.stores import listen_pids

from .sleepers import Sleeper, until
from .test_start_leased import In, Quick, assert_ran_under_the_start_s_lease

pytestmark = pytest.mark.postgres

TYPE = "offered.v1"
RUNNER = Claimant("runner-1", 30.0, "host:1:abc", frozenset({TYPE}))


@pytest.fixture
def admin(pg_dsn: str, pg_schema: str) -> Iterator[psycopg.Connection[Any]]:
    conn = psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={pg_schema}")
    try:
        yield conn
    finally:
        conn.close()


def _asleep(admin: psycopg.Connection[Any], incarnation: str) -> int | None:
    row = admin.execute(
        "SELECT sleeping FROM wf_idle_runners WHERE incarnation = %s", (incarnation,)
    ).fetchone()
    return None if row is None else int(row[0])


def _task(admin: psycopg.Connection[Any], iid: str) -> tuple[Any, ...]:
    row = admin.execute(
        "SELECT t.lease_owner, t.lease_token, t.in_flight, i.status FROM wf_tasks t"
        " JOIN wf_instances i ON i.id = t.instance_id WHERE t.instance_id = %s",
        (iid,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def _released(store: PostgresStore, iid: str) -> list[tuple[str | None, int | None]]:
    """Who handed which attempt back unrun (its STEP_RELEASED events)."""
    return [(e.worker, e.attempt) for e in store.events(iid) if e.event_type == Ev.STEP_RELEASED]


def _new() -> NewInstance:
    return NewInstance(str(uuid.uuid4()), TYPE, {}, "first")


def test_a_start_is_leased_to_a_worker_asleep_in_another_process(
    pg_store: PostgresStore, pg_other_store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    """The start's commit is the claim of the other process's worker: the first step
    started, the task in flight under a token of the claimant's incarnation; that
    process hears it and hands it to the worker, which wakes."""
    sleeper = Sleeper(pg_store, [TYPE], RUNNER)
    until(lambda: _asleep(admin, RUNNER.incarnation) == 1)
    new = _new()
    assert pg_other_store.create(new) == (new.id, True)
    assert sleeper.join()[0]  # woken by the hand-over
    claim = pg_store.handed_claim(RUNNER)
    assert claim is not None
    assert claim.started
    assert claim.instance.id == new.id
    assert claim.instance.status == Status.RUNNING
    assert (claim.instance.step, claim.instance.attempts) == ("first", {"first": 1})
    assert claim.task.lease_owner == "runner-1"
    assert claim.task.lease_token is not None
    assert claim.task.lease_token.startswith("host:1:abc/")
    log = pg_store.events(new.id)
    assert [e.event_type for e in log] == [Ev.CREATED, Ev.STEP_STARTED]
    assert log[1].worker == "runner-1"
    assert log[1].created_at == log[0].created_at  # one commit
    assert pg_other_store.handed_claim(RUNNER) is None  # nothing of it in the starting process
    assert Client(pg_store).verify(new.id) == {}


def test_no_start_is_leased_to_a_runner_whose_process_is_gone(
    pg_store: PostgresStore, pg_other_store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    """A row whose advisory lock nobody holds (its process was killed) is passed over:
    the start is made as it is without offers, for any runner to claim; the next
    process to write its own rows deletes it."""
    admin.execute(
        "INSERT INTO wf_idle_runners (incarnation, worker, lease, types, channel, lock_key,"
        " sleeping) VALUES ('dead:1:x', 'dead', 30, ARRAY[%s], 'swf_offer_dead', 77, 5)",
        (TYPE,),
    )
    new = _new()
    assert pg_other_store.create(new) == (new.id, True)
    assert _task(admin, new.id) == (None, None, False, "PENDING")
    assert pg_other_store.next_due(types=[TYPE]) == 0
    assert _asleep(admin, "dead:1:x") == 5  # not counted off either
    Sleeper(pg_store, [TYPE], RUNNER)
    until(lambda: _asleep(admin, "dead:1:x") is None)  # swept by the first write
    assert _asleep(admin, RUNNER.incarnation) is not None


def test_an_idle_runner_runs_starts_of_another_process_under_their_own_lease(
    pg_store: PostgresStore, pg_other_store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    """Ten starts made through another store object while the runner idles: each one's
    first STEP_STARTED is in the start's commit, for the runner's worker; each step runs
    once. Stopped, the runner takes its row away: a start after that is not leased."""
    options = RunnerOptions(concurrency=2, idle_poll=60, reconcile_on_start=False)
    runner = Runner(pg_store, [Quick], options=options)
    client = Client(pg_other_store, [Quick])
    runner.start()
    try:
        ids = []
        for n in range(10):
            until(lambda: _asleep(admin, runner.incarnation) == 2)  # both workers idle
            ids.append(client.start(Quick, In(n=n)))
            until(lambda: client.get(ids[-1]).status == Status.COMPLETED)
    finally:
        runner.stop()
    for iid in ids:
        assert_ran_under_the_start_s_lease(client, iid, runner.worker_id)
    assert _asleep(admin, runner.incarnation) is None
    late = client.start(Quick, In(n=99))
    assert _task(admin, late) == (None, None, False, "PENDING")


def test_a_start_leased_to_a_runner_that_stops_before_running_it_is_released(
    pg_store: PostgresStore, pg_other_store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    """The row said a worker slept (a hint a few milliseconds behind), none did: the
    start is handed to the runner all the same, and the runner, stopping, hears every
    start leased to it before its row went and releases it, due at once, its first
    attempt counted and marked as never run (STEP_RELEASED): the next claim starts the
    second attempt, with no reconcile."""
    runner = Runner(pg_store, [Quick], options=RunnerOptions(concurrency=1))
    Sleeper(pg_store, [Quick.workflow_type], runner._claimant, timeout=0.2).join()
    until(lambda: _asleep(admin, runner.incarnation) == 0)
    admin.execute(
        "UPDATE wf_idle_runners SET sleeping = 1 WHERE incarnation = %s", (runner.incarnation,)
    )
    iid = Client(pg_other_store, [Quick]).start(Quick, In(n=1))
    assert _task(admin, iid)[:1] == (runner.worker_id,)
    runner.stop()  # never started: no worker ever looks
    assert _asleep(admin, runner.incarnation) is None
    assert pg_store.handed_claim(runner._claimant) is None
    owner, _, in_flight, _ = _task(admin, iid)
    assert (owner, in_flight) == (None, False)
    assert _released(pg_other_store, iid) == [(runner.worker_id, 1)]
    assert pg_other_store.next_due(types=[Quick.workflow_type]) == 0
    [claim] = pg_other_store.claim(worker="w", types=[Quick.workflow_type], lease=30.0)
    assert claim.instance.id == iid
    assert (claim.started, claim.task.attempt) == (True, 2)  # not in doubt: never ran


def test_a_start_leased_to_a_runner_whose_workers_are_all_busy_is_handed_back(
    pg_store: PostgresStore, pg_other_store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    """The row said a worker slept, none did, and none of the runner's workers looks
    within ``spare_wait``: the runner's process hands the start back, due at once and
    told to every process, its first attempt counted and marked as never run
    (STEP_RELEASED, so not in doubt)."""
    runner = Runner(pg_store, [Quick], options=RunnerOptions(concurrency=1))
    Sleeper(pg_store, [Quick.workflow_type], runner._claimant, timeout=0.2).join()
    until(lambda: _asleep(admin, runner.incarnation) == 0)
    admin.execute(
        "UPDATE wf_idle_runners SET sleeping = 1 WHERE incarnation = %s", (runner.incarnation,)
    )
    iid = Client(pg_other_store, [Quick]).start(Quick, In(n=1))
    heard = time.monotonic()
    until(lambda: _task(admin, iid)[0] is None)  # handed back
    assert time.monotonic() - heard >= 0.1  # after spare_wait, not at once
    owner, token, in_flight, _ = _task(admin, iid)
    assert (owner, in_flight) == (None, False)
    assert token.startswith(f"{runner.incarnation}/")
    assert "/o" not in token  # it was heard
    assert _released(pg_other_store, iid) == [(runner.worker_id, 1)]
    assert pg_store.handed_claim(runner._claimant) is None  # taken back from the runner
    assert pg_other_store.next_due(types=[Quick.workflow_type]) == 0
    [claim] = pg_other_store.claim(worker="w", types=[Quick.workflow_type], lease=30.0)
    assert claim.instance.id == iid
    assert (claim.started, claim.task.attempt) == (True, 2)  # not in doubt: never ran
    runner.stop()


ORDER: list[int] = []  # the inputs of Slow's and Long's steps, in the order they ran
ORDER_LOCK = threading.Lock()


def _ran(n: int, seconds: float) -> None:
    with ORDER_LOCK:
        ORDER.append(n)
    time.sleep(seconds)


class Slow(Workflow[In, BaseModel]):
    workflow_type = "t.offered.slow.v1"

    @step(initial=True, to=COMPLETED)
    def first(self, ctx: StepContext[In, BaseModel]) -> None:
        _ran(ctx.input.n, 0.02)


def test_a_start_leased_to_a_busy_runner_runs_before_the_work_it_keeps_claiming(
    pg_store: PostgresStore, pg_other_store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    """Leased to a runner whose one worker is busy (the hint behind), the start is run
    when that worker's step is done, before it claims the next of a backlog: a worker
    takes what was handed to it first, and never starves it while claims find work
    (within ``spare_wait``, here long enough for a slow machine's step)."""
    ORDER.clear()
    offers = pg_store._offers
    assert offers is not None
    offers.spare_wait = 30.0
    client = Client(pg_other_store, [Slow])
    backlog = [client.start(Slow, In(n=n)) for n in range(40)]
    options = RunnerOptions(concurrency=1, reconcile_on_start=False)
    runner = Runner(pg_store, [Slow], options=options)
    Sleeper(pg_store, [Slow.workflow_type], runner._claimant, timeout=0.2).join()
    until(lambda: _asleep(admin, runner.incarnation) == 0)
    runner.start()
    try:
        until(lambda: len(ORDER) >= 5)  # busy on the backlog
        admin.execute(
            "UPDATE wf_idle_runners SET sleeping = 1 WHERE incarnation = %s",
            (runner.incarnation,),
        )
        offered = client.start(Slow, In(n=1000))
        assert _task(admin, offered)[0] == runner.worker_id  # leased to the busy runner
        with ORDER_LOCK:
            ran_before = len(ORDER)
        until(lambda: 1000 in ORDER)
        with ORDER_LOCK:
            position = ORDER.index(1000)
        assert position <= ran_before + 2
        until(lambda: all(client.get(i).status == Status.COMPLETED for i in backlog))
    finally:
        runner.stop()


class Long(Workflow[In, BaseModel]):
    workflow_type = "t.offered.long.v1"

    @step(initial=True, to=COMPLETED)
    def first(self, ctx: StepContext[In, BaseModel]) -> None:
        _ran(ctx.input.n, 0.5)


def test_a_start_leased_to_a_busy_runner_is_run_by_an_idle_runner_of_another_process(
    pg_dsn: str,
    pg_schema: str,
    pg_store: PostgresStore,
    pg_other_store: PostgresStore,
    admin: psycopg.Connection[Any],
) -> None:
    """Leased to a runner whose one worker is in a long step (the hint behind), the
    start does not wait for that step: once ``spare_wait`` passed, its process hands it
    back and the idle runner of a third process runs it, while the busy runner is still
    at its backlog."""
    ORDER.clear()
    producer = PostgresStore(pg_dsn, schema=pg_schema)
    busy = Runner(pg_store, [Long, Quick], options=RunnerOptions(concurrency=1))
    idle = Runner(pg_other_store, [Quick], options=RunnerOptions(concurrency=1, idle_poll=60))
    try:
        client = Client(producer, [Long, Quick])
        backlog = [client.start(Long, In(n=n)) for n in range(4)]
        Sleeper(pg_store, [Long.workflow_type], busy._claimant, timeout=0.2).join()
        until(lambda: _asleep(admin, busy.incarnation) == 0)  # the busy runner's row
        busy.start()
        idle.start()
        until(lambda: len(ORDER) >= 1)  # in its first long step
        until(lambda: _asleep(admin, idle.incarnation) == 1)
        admin.execute(
            "UPDATE wf_idle_runners SET sleeping = 5 WHERE incarnation = %s",
            (busy.incarnation,),
        )
        iid = client.start(Quick, In(n=1000))
        until(lambda: client.get(iid).status == Status.COMPLETED)
        with ORDER_LOCK:
            assert len(ORDER) < len(backlog)  # the backlog is not done
        started = [e for e in client.history(iid) if e.event_type == Ev.STEP_STARTED]
        assert [(e.worker, e.attempt) for e in started[:2]] == [
            (busy.worker_id, 1),  # the start's own commit, for the busy runner
            (idle.worker_id, 2),  # handed back unrun, and run by the idle one
        ]
        assert _released(producer, iid) == [(busy.worker_id, 1)]
        assert client.verify(iid) == {}
        until(lambda: all(client.get(i).status == Status.COMPLETED for i in backlog), 10)
    finally:
        busy.stop()
        idle.stop()
        producer.close()


def test_a_process_that_finds_its_lock_held_after_a_reconnect_takes_another(
    pg_store: PostgresStore, pg_other_store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    """The LISTEN connection is lost and its lock is held still when it is back (the old
    backend not yet gone, as after a network cut): the process takes a new key, writes
    its row with it, and is leased starts again."""
    Sleeper(pg_store, [TYPE], RUNNER, timeout=0.2).join()
    until(lambda: _asleep(admin, RUNNER.incarnation) == 0)
    key = pg_store._offers.lock_key  # type: ignore[union-attr]
    epoch = pg_store._wakeup._epoch
    [pid] = listen_pids(admin, pg_store.channel)
    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    admin.execute("SELECT pg_advisory_lock(%s)", (key,))  # once the old backend is gone
    try:
        until(lambda: listen_pids(admin, pg_store.channel) not in ([], [pid]))
        # The watcher wakes every thread when it loses the connection and once it listens
        # again (a thread's next wait returns at once): the sleeper below must come after.
        until(lambda: pg_store._wakeup._epoch >= epoch + 2)
        assert pg_store._offers.lock_key != key  # type: ignore[union-attr]
        sleeper = Sleeper(pg_store, [TYPE], RUNNER)
        until(lambda: _asleep(admin, RUNNER.incarnation) == 1)
        row = admin.execute(
            "SELECT lock_key FROM wf_idle_runners WHERE incarnation = %s", (RUNNER.incarnation,)
        ).fetchone()
        assert row == (pg_store._offers.lock_key,)  # type: ignore[union-attr]
        new = _new()
        pg_other_store.create(new)
        assert sleeper.join()[0]
        claim = pg_store.handed_claim(RUNNER)
        assert claim is not None
        assert claim.instance.id == new.id
    finally:
        admin.execute("SELECT pg_advisory_unlock_all()")


def test_a_start_its_runner_never_heard_of_is_taken_over_once_its_lease_runs_out(
    pg_store: PostgresStore,
    pg_other_store: PostgresStore,
    admin: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The notification is lost (the LISTEN connection went down as it was sent): the
    runner's heartbeat does not extend a lease it never heard of, so the lease runs out
    and another runner takes the task over, in doubt. A start it heard, it extends."""
    short = Claimant("runner-1", 0.5, "host:1:abc", frozenset({TYPE}))
    offers = pg_store._offers
    assert offers is not None
    received = offers.received
    monkeypatch.setattr(offers, "received", lambda payload: None)  # lost
    lost = _new()
    Sleeper(pg_store, [TYPE], short)
    until(lambda: _asleep(admin, short.incarnation) == 1)
    pg_other_store.create(lost)
    owner, token, in_flight, status = _task(admin, lost.id)
    assert (owner, in_flight, status) == ("runner-1", True, "RUNNING")
    assert token.startswith("host:1:abc/o")
    assert pg_store.heartbeat(worker="runner-1", lease=0.5, incarnation=short.incarnation) == 0
    time.sleep(0.6)
    [claim] = pg_other_store.claim(worker="w", types=[TYPE], lease=30.0)
    assert claim.instance.id == lost.id
    assert not claim.started  # in doubt: its attempt 1 is in the log

    monkeypatch.setattr(offers, "received", received)
    Sleeper(pg_store, [TYPE], short)  # the row says 0 since the lost start: now 2
    until(lambda: _asleep(admin, short.incarnation) == 2)
    heard = _new()
    pg_other_store.create(heard)
    until(lambda: pg_store.handed_claim(short) is not None)
    assert pg_store.heartbeat(worker="runner-1", lease=0.5, incarnation=short.incarnation) == 1
