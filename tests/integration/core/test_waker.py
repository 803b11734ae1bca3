"""``ctx.waker()``: an outside event source cuts a snooze short, on both stores.

The snoozes here are an hour long: a step that runs again within the test's timeout was
woken, never timed out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    Runner,
    RunnerOptions,
    Snooze,
    Status,
    StepContext,
    Store,
    Workflow,
    step,
)
from statemachine_wf.definition.events import Ev

HOUR = 3600.0


class In(BaseModel):
    early: bool = False  # call the waker before the snooze is even committed


class Pr(BaseModel):
    pass


class WaitsForEvent(Workflow[In, Pr]):
    workflow_type = "t.waker.v1"
    wakers: list[Callable[[], None]]
    runs: list[int]
    ran: threading.Event

    @step(initial=True, to=COMPLETED)
    def check(self, ctx: StepContext[In, Pr]) -> None:
        self.runs.append(ctx.attempt)
        self.ran.set()
        if len(self.runs) > 1:
            return
        wake = ctx.waker()
        if ctx.input.early:
            wake()  # the event came while the step still runs: it must not be lost
        else:
            self.wakers.append(wake)
        raise Snooze(HOUR, "waiting for the event")


def _run(store: Store, early: bool) -> tuple[Client, str, list[Callable[[], None]], list[int]]:
    wakers: list[Callable[[], None]] = []
    runs: list[int] = []
    ran = threading.Event()
    client = Client(store, [WaitsForEvent])
    i = client.start(WaitsForEvent, In(early=early))
    runner = Runner(
        store,
        [WaitsForEvent],
        # The safety poll finds nothing due (the task is parked for an hour): only the
        # waker can make it due. Short, so stop() never waits out a sleeping worker.
        options=RunnerOptions(concurrency=2, idle_poll=1.0),
        dependencies={"wakers": wakers, "runs": runs, "ran": ran},
    )
    runner.start()
    try:
        if not early:
            assert ran.wait(20), "the first run"
            for _ in range(2000):  # until the snooze is committed: parked for an hour
                if Ev.STEP_WAITING in [e.event_type for e in client.history(i)]:
                    break
                threading.Event().wait(0.01)
            assert [e.event_type for e in client.history(i)].count(Ev.STEP_WAITING) == 1
            threading.Thread(target=wakers[0]).start()  # from another thread
        for _ in range(2000):
            if client.status(i) == Status.COMPLETED:
                break
            threading.Event().wait(0.01)
    finally:
        runner.stop(timeout=10)
    return client, i, wakers, runs


def test_a_waker_called_from_another_thread_ends_the_snooze(store: Store) -> None:
    client, i, _, runs = _run(store, early=False)
    assert client.status(i) == Status.COMPLETED
    assert runs == [1, 2]  # woken once, ran once more
    assert client.verify(i) == {}


def test_a_waker_called_before_the_snooze_is_committed_is_not_lost(store: Store) -> None:
    client, i, _, runs = _run(store, early=True)
    assert client.status(i) == Status.COMPLETED
    assert runs == [1, 2]


def test_a_waker_called_after_the_instance_moved_on_changes_nothing(store: Store) -> None:
    client, i, wakers, runs = _run(store, early=False)
    assert client.status(i) == Status.COMPLETED
    wakers[0]()  # late: the instance has ended; nothing to wake, nothing written
    assert client.status(i) == Status.COMPLETED
    assert runs == [1, 2]
    assert client.verify(i) == {}
