"""A worker that hands its task back at a streak's end tells nobody.

A long loop's claim runs ``STREAK`` steps under its lease, then hands the next step back,
due at once, and claims in priority order (test_priority_streak.py). That claim is this
worker's next statement and sees the task, so the hand-back notifies no other process
(``decide.Reschedule.tell``): each notification woke an idle worker in every runner
process, and all but one of their claims found nothing (``bench dag --count``, steps in
a row at four processes: bench/README.md, "Session 63"); on SQLite it nudged an idle
worker of its process. A runner that stops hands its step back for
another runner to take, and that still tells everyone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import ClassVar

import pytest
from pydantic import BaseModel

from statemachine_wf import COMPLETED, Client, Runner, RunnerOptions, StepContext, Workflow, step
from statemachine_wf.definition.events import Ev
from statemachine_wf.runtime.operations import STREAK
from statemachine_wf.stores.postgres import PostgresStore
from statemachine_wf.stores.sqlite import SQLiteStore

from .heard import heard_on


class In(BaseModel):
    rounds: int


class Pr(BaseModel):
    pass


class Spin(Workflow[In, Pr]):
    """Goes round its one step ``rounds`` times; the round ``hold_at`` waits for ``go``."""

    workflow_type = "t.streak.quiet.v1"
    ran: ClassVar[list[int]] = []
    hold_at: ClassVar[int] = 0
    inside: ClassVar[threading.Event] = threading.Event()
    go: ClassVar[threading.Event] = threading.Event()

    @step(initial=True, to=["spin", COMPLETED])
    def spin(self, ctx: StepContext[In, Pr]) -> str:
        done = len(Spin.ran) + 1  # one worker runs every round
        Spin.ran.append(done)
        if done == Spin.hold_at:
            Spin.inside.set()
            Spin.go.wait(10)
        return "spin" if done < ctx.input.rounds else COMPLETED


@pytest.fixture(autouse=True)
def fresh_spin() -> None:
    Spin.ran, Spin.hold_at = [], 0
    Spin.inside, Spin.go = threading.Event(), threading.Event()


@pytest.fixture
def heard(pg_store: PostgresStore, pg_dsn: str) -> Iterator[Callable[[], list[str]]]:
    with heard_on(pg_store, pg_dsn) as drain:
        yield drain


ROUNDS = 2 * STREAK + 10
"""Two streaks' ends, and some rounds after."""


def _runner(store: PostgresStore | SQLiteStore) -> Runner:
    return Runner(store, [Spin], options=RunnerOptions(concurrency=1, idle_poll=0.2))


def _run_to_its_end(store: PostgresStore | SQLiteStore, client: Client, iid: str) -> None:
    """Run the loop ``iid`` to its end on a runner of one worker: each round once, and
    each step after a streak's end started by that worker's claim (its own attempt, no
    ``STEP_STARTED`` written by the hand-back)."""
    runner = _runner(store)
    runner.start()
    try:
        assert client.wait(iid, timeout=30).status.value == "COMPLETED"
    finally:
        runner.stop(timeout=10)
    assert Spin.ran == list(range(1, ROUNDS + 1))
    starts = [e for e in client.history(iid) if e.event_type == Ev.STEP_STARTED]
    assert [e.attempt for e in starts] == list(range(1, ROUNDS + 1))


@pytest.mark.postgres
def test_a_loop_past_two_streaks_notifies_nobody(
    pg_store: PostgresStore, heard: Callable[[], list[str]]
) -> None:
    client = Client(pg_store, [Spin])
    iid = client.start(Spin, {"rounds": ROUNDS})
    assert heard() == [Spin.workflow_type]  # the start: no runner yet, everyone told
    _run_to_its_end(pg_store, client, iid)
    # No other process was told of either hand-back (nor of anything else).
    assert heard() == []


@pytest.mark.postgres
def test_a_stopping_runner_hands_its_step_back_and_tells_everyone(
    pg_store: PostgresStore, heard: Callable[[], list[str]]
) -> None:
    Spin.hold_at = 3
    client = Client(pg_store, [Spin])
    iid = client.start(Spin, {"rounds": 10})
    heard()
    runner = _runner(pg_store)
    runner.start()
    assert Spin.inside.wait(10)
    stopping = threading.Thread(target=runner.stop, kwargs={"timeout": 10})
    stopping.start()
    while not runner._stopping.is_set():
        threading.Event().wait(0.005)
    Spin.go.set()  # round 3 completes while its runner stops
    stopping.join(15)
    assert not stopping.is_alive()
    assert Spin.ran == [1, 2, 3]
    assert heard() == [Spin.workflow_type]  # the hand-back: another runner must take it
    assert pg_store.next_due(types=[Spin.workflow_type]) == 0  # due at once, unleased
    starts = [e for e in client.history(iid) if e.event_type == Ev.STEP_STARTED]
    assert len(starts) == 3  # round 4 not started: nothing in doubt


def test_sqlite_a_loop_past_two_streaks_nudges_no_worker_of_its_process(
    sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite has no notification: a commit that may have made a task due nudges an idle
    # worker of its process (_made_due); its watcher wakes one for another's commits.
    made_due: list[str] = []
    monkeypatch.setattr(sqlite_store, "_made_due", lambda: made_due.append("nudge"))
    client = Client(sqlite_store, [Spin])
    iid = client.start(Spin, {"rounds": ROUNDS})
    _run_to_its_end(sqlite_store, client, iid)
    assert made_due == ["nudge"]  # the finish's alone (SQLite's cannot tell if it made work)
