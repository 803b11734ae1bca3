"""A runner's timer, handed over, goes to a worker of that runner.

One idle worker of each runner, the timer holder, sleeps until the next due time of its
types; the others sleep until woken. A holder that wakes to claim hands the timer over
by waking another worker. Several runners on one store object sleep in one queue, and
that wake-up went to the first sleeper, which could be another runner's: then nobody of
the first runner watched its next due time, and a timer fired only once a worker of its
runner came back (here: held by a step until the test ends).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pydantic import BaseModel

from statemachine_wf import COMPLETED, Client, Runner, RunnerOptions, StepContext, Workflow, step
from statemachine_wf.core.store import Store


class Nap(BaseModel):
    n: int
    seconds: float
    hold: bool = False


WOKE: dict[int, float] = {}
GATE = threading.Event()


class Napper(Workflow[Nap, BaseModel]):
    workflow_type = "t.handover.napper.v1"

    @step(initial=True, to=COMPLETED)
    def nap(self, ctx: StepContext[Nap, BaseModel]) -> None:
        ctx.sleep(ctx.input.seconds)
        WOKE[ctx.input.n] = time.monotonic()
        if ctx.input.hold:
            assert GATE.wait(60)


class Other(Workflow[Nap, BaseModel]):
    workflow_type = "t.handover.other.v1"

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[Nap, BaseModel]) -> None:
        pass


def test_a_timer_handed_over_wakes_a_worker_of_its_own_runner(store: Store) -> None:
    slow = RunnerOptions(concurrency=2, idle_poll=60, reconcile_on_start=False)
    other = Runner(store, [Other], options=slow)
    napper = Runner(store, [Napper], options=slow)
    client = Client(store, [Napper])
    WOKE.clear()
    GATE.clear()

    def sleeping() -> int:
        return int(store._wakeup.sleeping)  # type: ignore[attr-defined]

    other.start()  # its workers fall asleep first: at the head of the queue
    try:
        _until(lambda: sleeping() == 2)
        napper.start()
        _until(lambda: sleeping() == 4)
        began = time.monotonic()
        client.start(Napper, Nap(n=0, seconds=1.0, hold=True))  # its step then holds a worker
        client.start(Napper, Nap(n=1, seconds=2.5))
        _until(lambda: 1 in WOKE, timeout=20)
        # Fired by the worker the timer was handed to, not by the held one once free.
        assert WOKE[1] - began < 10
        assert WOKE[0] - began < WOKE[1] - began
    finally:
        GATE.set()
        napper.stop()
        other.stop()


def _until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
