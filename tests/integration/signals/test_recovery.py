"""All runners down, database up: signals and timers stay durable (seed 003, 11.2).

A runner process parks instances in waits and sleeps and is SIGKILLed; with no runner at
all, signals are sent (Python and SQL) and timers fall due; then one fresh runner process
starts, and every due timer fires and every wait resumes, once.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from statemachine_wf import Client, Status
from statemachine_wf.definition.events import Ev
from tests.integration.crash.conftest import make_target
from tests.integration.crash.harness import Children, Target, poll_until

from .workflows import WORKFLOWS, Approval, Sleeper

WORKER = Path(__file__).with_name("worker_main.py")


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    return make_target(request.param, tmp_path, request)


def sql_signal(target: Target, instance_id: str, payload: str) -> None:
    """A non-Python producer's INSERT, straight through the database driver."""
    insert = "INSERT INTO wf_signals (instance_id, name, payload) VALUES ({}, 'approved', {})"
    if target.kind == "sqlite":
        with sqlite3.connect(target.url.removeprefix("sqlite:///")) as conn:
            conn.execute(insert.format("?", "?"), (instance_id, payload))
        return
    with psycopg.connect(target.url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(str(target.schema))))
        conn.execute(insert.format("%s", "%s"), (instance_id, payload))


def test_signals_and_timers_survive_all_runners_down(target: Target) -> None:
    store = target.open_store()
    client = Client(store, WORKFLOWS)
    try:
        with Children(target, WORKER) as kids:
            first = kids.spawn("first", lease=1.0, concurrency=4)
            waits = [client.start(Approval, {"timeout": 600}) for _ in range(6)]
            timeouts = [client.start(Approval, {"timeout": 1.0}) for _ in range(3)]
            sleeps = [client.start(Sleeper, {"seconds": 1.0}) for _ in range(3)]
            everyone = waits + timeouts + sleeps

            def all_parked() -> bool:
                return all(client.get(i).waiting == "0" for i in everyone)

            poll_until(all_parked, timeout=60, what="every instance to park")
            first.send_signal(signal.SIGKILL)
            kids.wait_exit(first, 10, "SIGKILL")

            # No runner anywhere: signals are sent, timers fall due, nothing moves.
            for n, iid in enumerate(waits[:3]):
                client.signal(iid, "approved", {"n": n})
            for n, iid in enumerate(waits[3:], start=3):
                sql_signal(target, iid, f'{{"n": {n}}}')
            latest = max(client.get(i).waits["0"]["until"] for i in timeouts + sleeps)
            poll_until(lambda: time.time() > latest + 0.2, timeout=30, what="timers due")
            assert client.signal_counts()["pending"] == 6 + 12  # signals + every wait's timer
            assert all(client.get(i).waiting == "0" for i in everyone)

            kids.spawn("second", lease=1.0, concurrency=4)

            def all_done() -> bool:
                return all(client.get(i).status == Status.COMPLETED for i in everyone)

            poll_until(all_done, timeout=60, what="every instance to complete")
        for n, iid in enumerate(waits):
            assert client.get(iid).progress["approved"] == {"n": n}
        for iid in timeouts:
            assert client.get(iid).progress["expired"] is True
        for iid in everyone:
            resolved = [
                e for e in store.events(iid) if e.event_type in (Ev.SIGNAL_RECEIVED, Ev.TIMER_FIRED)
            ]
            assert len(resolved) == 1, iid
            assert client.verify(iid) == {}
        # The 6 long timers were voided when their instances ended; nothing stale or lost.
        counts = client.signal_counts()
        assert counts == {"pending": 0, "applied": 12, "stale": 0, "dead": 0, "void": 6}
    finally:
        store.close()


def test_a_runner_killed_after_its_claim_fired_a_timer_resumes_the_step_once(
    target: Target,
) -> None:
    """SIGKILL right after the claim that fired a due timer committed (TIMER_FIRED and the
    step's STEP_STARTED in that claim, the step not yet run): the step is in flight, and
    the next runner runs it again from the top, which finds the wait's outcome. The timer
    fired once, nothing is left pending, and every row is the fold of its log.

    One worker, so the claims come in order: four that start the sleepers (each parks),
    then the fifth, which fires the first timer to fall due."""
    store = target.open_store()
    client = Client(store, WORKFLOWS)
    try:
        sleepers = [client.start(Sleeper, {"seconds": 1.0}) for _ in range(4)]
        with Children(target, WORKER) as kids:
            first = kids.spawn("first", lease=1.0, concurrency=1, kill="claim:after:5")
            kids.wait_exit(first, 30, "SIGKILL")
            assert first.returncode == -signal.SIGKILL
            fired = [
                i for i in sleepers if Ev.TIMER_FIRED in [e.event_type for e in store.events(i)]
            ]
            assert len(fired) == 1, "the fifth claim fired one timer"
            [killed] = fired
            assert client.get(killed).status == Status.RUNNING  # its step never ran on
            assert client.get(killed).waiting is None

            kids.spawn("second", lease=1.0, concurrency=2)

            def all_done() -> bool:
                return all(client.get(i).status == Status.COMPLETED for i in sleepers)

            poll_until(all_done, timeout=60, what="every sleeper to complete")
        for iid in sleepers:
            types = [e.event_type for e in store.events(iid)]
            assert types.count(Ev.TIMER_FIRED) == 1, iid
            assert client.verify(iid) == {}
        started = [e.attempt for e in store.events(killed) if e.event_type == Ev.STEP_STARTED]
        assert started == [1, 2, 3]  # the first run, the fired claim's, the run after the kill
        assert client.signal_counts() == {
            "pending": 0,
            "applied": 4,
            "stale": 0,
            "dead": 0,
            "void": 0,
        }
    finally:
        store.close()
