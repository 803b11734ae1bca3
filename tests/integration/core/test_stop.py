"""``Runner.stop()`` ends a worker that went to sleep just after the stop's wake-up.

A worker checks the stop flag, finds nothing to claim, asks for the next due time and
then sleeps until a wake-up or its safety poll. A stop that lands between the check and
the sleep used to wake nobody (the store's wake-up reaches only the workers already
asleep), and the worker slept on until ``idle_poll``: here an hour.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from statemachine_wf import COMPLETED, Runner, RunnerOptions, StepContext, Store, Workflow, step


class In(BaseModel):
    n: int = 0


class Idle(Workflow[In, BaseModel]):
    workflow_type = "t.stop.idle.v1"

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, BaseModel]) -> None: ...


class _LateSleeper:
    """The store, except that the first ``next_due`` returns only after the stop's first
    wake-up went out: the worker then goes to sleep with nobody left to wake it once."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.entered = threading.Event()
        self.stopping = threading.Event()

    def next_due(
        self,
        *,
        types: Sequence[str],
        dag_types: Sequence[str] | None = None,
        worker: str = "",
    ) -> Any:
        if not self.entered.is_set():
            self.entered.set()
            self.stopping.wait(10)
            time.sleep(0.3)  # past stop()'s first store.wake()
        return self._store.next_due(types=types, dag_types=dag_types, worker=worker)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_stop_wakes_a_worker_that_fell_asleep_after_the_wake_up(store: Store) -> None:
    late = _LateSleeper(store)
    runner = Runner(
        late,
        [Idle],
        options=RunnerOptions(concurrency=1, idle_poll=3600.0, reconcile_on_start=False),
    )
    before = set(threading.enumerate())
    runner.start()
    started = [t for t in threading.enumerate() if t not in before]
    assert late.entered.wait(10), "the worker never looked for due work"
    late.stopping.set()
    runner.stop(timeout=10)
    alive = [t.name for t in started if t.is_alive()]
    assert alive == [], f"threads still running after stop(): {alive}"
