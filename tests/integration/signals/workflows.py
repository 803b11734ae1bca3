"""Workflows that wait for signals and sleep, shared by the signal tests and their runners.

``RUNS`` counts every execution of a step per instance (a step re-runs from the top after
each wait); ``AFTER`` counts what runs after a wait returned: the side effect that must
happen once however often the signal is delivered.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from statemachine_wf import COMPLETED, StepContext, WaitTimeout, Workflow, step

RUNS: Counter[str] = Counter()
AFTER: Counter[str] = Counter()


class WaitIn(BaseModel):
    timeout: float | None = None
    share_token: bool = False
    second: bool = False


class WaitPr(BaseModel):
    approved: Any = None
    second: Any = None
    expired: bool | None = None
    token: str | None = None


class Approval(Workflow[WaitIn, WaitPr]):
    """Waits for 'approved' (optionally with a shared token), then maybe for 'second'."""

    workflow_type = "t.approval.v1"

    @step(initial=True, to=["done", "expired"], signals=["approved", "second"])
    def ask(self, ctx: StepContext[WaitIn, WaitPr]) -> str:
        RUNS[ctx.instance_id] += 1
        if ctx.input.share_token:
            ctx.save(token=ctx.wait_token)  # handed to the outside world before the wait
        try:
            approved = ctx.wait_for("approved", timeout=ctx.input.timeout)
        except WaitTimeout:
            ctx.set(expired=True)
            return "expired"
        ctx.set(approved=approved)
        if ctx.input.second:
            ctx.set(second=ctx.wait_for("second"))
        AFTER[ctx.instance_id] += 1
        return "done"

    @step(to=COMPLETED)
    def done(self, ctx: StepContext[WaitIn, WaitPr]) -> None:
        return None

    @step(to=COMPLETED)
    def expired(self, ctx: StepContext[WaitIn, WaitPr]) -> None:
        return None


class SleepIn(BaseModel):
    seconds: float = 0.0
    until: float | None = None
    hold: bool = False  # after the sleep, stay in the step until HOLD is set


HOLD = threading.Event()


class SleepPr(BaseModel):
    woke_at: float | None = None


class Sleeper(Workflow[SleepIn, SleepPr]):
    """Sleeps ``seconds`` (or until ``until``, epoch seconds) and records when it woke."""

    workflow_type = "t.sleeper.v1"

    @step(initial=True, to=COMPLETED)
    def nap(self, ctx: StepContext[SleepIn, SleepPr]) -> None:
        RUNS[ctx.instance_id] += 1
        if ctx.input.until is not None:
            ctx.sleep_until(datetime.fromtimestamp(ctx.input.until, UTC))
        else:
            ctx.sleep(ctx.input.seconds)
        AFTER[ctx.instance_id] += 1
        ctx.set(woke_at=datetime.now(UTC).timestamp())
        if ctx.input.hold:
            HOLD.wait(timeout=60)


WORKFLOWS: list[type[Workflow[Any, Any]]] = [Approval, Sleeper]
