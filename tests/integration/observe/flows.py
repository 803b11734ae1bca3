"""Workflows of the observability tests (also loaded by the CLI with ``-m``)."""

from __future__ import annotations

import logging
import threading
from collections import Counter

from pydantic import BaseModel

from statemachine_wf import COMPLETED, Fail, RetryPolicy, Stall, StepContext, Workflow, step

FAST = RetryPolicy(initial_delay=0.01, max_delay=0.02, jitter=False, max_attempts=3)
tries: Counter[str] = Counter()
_lock = threading.Lock()
log = logging.getLogger("observe.flows")


class Job(BaseModel):
    n: int = 0


class Out(BaseModel):
    done: bool = False


class Twice(Workflow[Job, Out]):
    """``first`` fails once (a retryable error), then ``second`` completes."""

    workflow_type = "observe.twice.v1"
    retry_policy = FAST

    @step(initial=True, to="second")
    def first(self, ctx: StepContext[Job, Out]) -> str:
        with _lock:
            tries[ctx.instance_id] += 1
            n = tries[ctx.instance_id]
        if n == 1:
            raise ConnectionError("the first try always fails")
        return "second"

    @step(to=COMPLETED)
    def second(self, ctx: StepContext[Job, Out]) -> None:
        log.info("second step of %s", ctx.instance_id)  # a user's record, in the step
        ctx.set(done=True)


class Napper(Workflow[Job, Out]):
    """Sleeps durably (a timer) for a moment, then completes."""

    workflow_type = "observe.napper.v1"

    @step(initial=True, to=COMPLETED)
    def nap(self, ctx: StepContext[Job, Out]) -> None:
        ctx.sleep(0.05)


class Stuck(Workflow[Job, Out]):
    """Stalls (retried an hour later: it stays STALLED for the test)."""

    workflow_type = "observe.stuck.v1"

    @step(initial=True, to=COMPLETED)
    def wait(self, ctx: StepContext[Job, Out]) -> None:
        raise Stall("nothing to do yet", retry_in=3600)


class Doomed(Workflow[Job, Out]):
    """Fails for good."""

    workflow_type = "observe.doomed.v1"

    @step(initial=True, to=COMPLETED)
    def act(self, ctx: StepContext[Job, Out]) -> None:
        raise Fail("never", code="never")
