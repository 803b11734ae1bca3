"""``run_until_idle`` never returns while a worker holds a task it claimed.

Between a claim's commit and the run of what it took, the task is leased: not due, so
``next_due`` does not show it. A CI run saw ``run_until_idle`` return there, with the
instance RUNNING and its retry pending (tests/integration/chain/test_reconcile.py, an
RPC refusing connections). Here the window is made wide: every claim that took work
returns half a second late.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    RetryPolicy,
    Runner,
    RunnerOptions,
    Status,
    StepContext,
    Store,
    Workflow,
    step,
)


class In(BaseModel):
    pass


class Pr(BaseModel):
    pass


class Flaky(Workflow[In, Pr]):
    """Fails its first run; the retry is due 0.4 s later (longer than ``settle``)."""

    workflow_type = "t.until_idle.flaky.v1"
    retry_policy = RetryPolicy(max_attempts=3, initial_delay=0.4, jitter=False)
    runs: list[int]
    guard: threading.Lock

    @step(initial=True, to=COMPLETED)
    def call(self, ctx: StepContext[In, Pr]) -> None:
        with self.guard:
            self.runs.append(ctx.attempt)
            first = len(self.runs) == 1
        if first:
            raise RuntimeError("rpc down")


class SlowClaims:
    """``store``, but a claim that took work returns ``delay`` seconds after its commit."""

    def __init__(self, store: Store, delay: float) -> None:
        self._store, self._delay = store, delay

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def claim(self, **kwargs: Any) -> Any:
        claims = self._store.claim(**kwargs)
        if claims:
            time.sleep(self._delay)
        return claims


def test_a_task_claimed_and_not_yet_run_keeps_the_runner_busy(store: Store) -> None:
    runs: list[int] = []
    iid = Client(store, [Flaky]).start(Flaky, In())
    slow: Any = SlowClaims(store, delay=0.5)
    runner = Runner(
        slow,
        [Flaky],
        options=RunnerOptions(concurrency=2, idle_poll=0.2),
        dependencies={"runs": runs, "guard": threading.Lock()},
    )
    runner.run_until_idle(timeout=30, settle=0.3)
    record = store.get(iid)
    assert record is not None
    assert record.status == Status.COMPLETED
    assert len(runs) == 2  # the failed run and its retry, both before it returned
