"""Workflows of the inbox tests (also loaded by the CLI with ``-m``)."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    RetryPolicy,
    Runner,
    RunnerOptions,
    StepContext,
    Store,
    Workflow,
    step,
)

FAST = RetryPolicy(initial_delay=0.01, max_delay=0.02, jitter=False, max_attempts=2)


class Order(BaseModel):
    n: int
    note: str = ""


class Done(BaseModel):
    doubled: int | None = None


class Echo(Workflow[Order, Done]):
    """Two steps; records who ran (``self.seen``, when given)."""

    workflow_type = "inbox.echo.v1"
    seen: list[tuple[str, int]] | None = None

    @step(initial=True, to="finish")
    def double(self, ctx: StepContext[Order, Done]) -> str:
        if self.seen is not None:
            self.seen.append((ctx.instance_id, ctx.input.n))
        ctx.set(doubled=ctx.input.n * 2)
        return "finish"

    @step(to=COMPLETED)
    def finish(self, ctx: StepContext[Order, Done]) -> None:
        pass


class Broken(Workflow[Order, Done]):
    """Always raises a retryable error: its retries run out (FAILED on exhaustion)."""

    workflow_type = "inbox.broken.v1"
    retry_policy = RetryPolicy(
        initial_delay=0.01, max_delay=0.02, jitter=False, max_attempts=2, on_exhausted="fail"
    )

    @step(initial=True, to=COMPLETED)
    def act(self, ctx: StepContext[Order, Done]) -> None:
        raise ConnectionError("the bank is down")


class Slow(Workflow[Order, Done]):
    """One step that sleeps ``n`` hundredths of a second, heartbeating (long action)."""

    workflow_type = "inbox.slow.v1"

    @step(initial=True, to=COMPLETED)
    def act(self, ctx: StepContext[Order, Done]) -> None:
        deadline = time.monotonic() + ctx.input.n / 100
        while time.monotonic() < deadline:
            time.sleep(0.02)


def run_all(store: Store, classes: list[type[Workflow[Any, Any]]], **opts: Any) -> None:
    """Run until nothing is due."""
    Runner(store, classes, options=RunnerOptions(concurrency=2, **opts)).run_until_idle(timeout=30)


def started(store: Store, classes: list[type[Workflow[Any, Any]]], **opts: Any) -> Runner:
    """A runner in the background (registered its types): stop it when done."""
    runner = Runner(store, classes, options=RunnerOptions(concurrency=2, idle_poll=0.5, **opts))
    runner.start()
    return runner


def wait_status(store: Store, instance_id: str, timeout: float = 20.0) -> Any:
    return Client(store).wait(instance_id, timeout=timeout)
