"""A snooze is not a failure: a step may snooze more often than ``max_attempts``.

Each run of a step has its own attempt number (they never repeat: the log's unique
index on ``(instance, node, event type, attempt)``), so ``ctx.attempt`` counts runs,
snoozed ones included; the retry budget counts failures only.
"""

from __future__ import annotations

import threading

from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    RetryPolicy,
    Runner,
    Snooze,
    Status,
    StepContext,
    Store,
    Workflow,
    step,
)
from statemachine_wf.definition.events import Ev


class In(BaseModel):
    snoozes: int
    fail_first: bool = False


class Pr(BaseModel):
    pass


class Poll(Workflow[In, Pr]):
    workflow_type = "t.snooze.budget.v1"
    retry_policy = RetryPolicy(max_attempts=2, initial_delay=0.01, jitter=False)
    runs: list[int]
    guard: threading.Lock

    @step(initial=True, to=COMPLETED)
    def check(self, ctx: StepContext[In, Pr]) -> None:
        with self.guard:
            self.runs.append(ctx.attempt)
            n = len(self.runs)
        if ctx.input.fail_first and n == 1:
            raise RuntimeError("rpc down")  # one counted failure of the two allowed
        if n <= ctx.input.snoozes + ctx.input.fail_first:
            raise Snooze(0.01, "tx pending")


def test_a_step_snoozes_more_often_than_max_attempts_and_completes(store: Store) -> None:
    for fail_first in (False, True):
        runs: list[int] = []
        client = Client(store, [Poll])
        i = client.start(Poll, In(snoozes=5, fail_first=fail_first))
        deps = {"runs": runs, "guard": threading.Lock()}
        Runner(store, [Poll], dependencies=deps).run_until_idle(timeout=20)
        assert client.status(i) == Status.COMPLETED
        history = client.history(i)
        kinds = [e.event_type for e in history]
        assert Ev.QUARANTINED not in kinds
        assert all(
            e.payload.get("outcome") == "retry" for e in history if e.event_type == Ev.STEP_FAILED
        ), "never STALLED or FAILED"
        assert kinds.count(Ev.STEP_FAILED) == int(fail_first)
        waits = [e for e in history if e.event_type == Ev.STEP_WAITING]
        assert [e.payload["reason"] for e in waits] == ["tx pending"] * 5
        # Every run is a new attempt number; only the failure counted against the budget.
        assert runs == list(range(1, 7 + fail_first))
        if fail_first:
            (failed,) = [e for e in history if e.event_type == Ev.STEP_FAILED]
            assert failed.payload["failures"] == 1
        assert client.verify(i) == {}
