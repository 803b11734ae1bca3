"""A worker runs a state machine's next step under the lease it holds, with no claim, for
at most ``STREAK`` steps after the one it claimed: then the step is handed back, due at
once, and the worker claims in priority order. So a higher-priority workflow started
behind a long loop waits for a streak of its steps, not for its end."""

from __future__ import annotations

import threading
from typing import ClassVar

from pydantic import BaseModel

from statemachine_wf import COMPLETED, Client, Runner, RunnerOptions, StepContext, Workflow, step
from statemachine_wf.core.store import Store
from statemachine_wf.definition.events import Ev
from statemachine_wf.runtime.operations import STREAK

ROUNDS = STREAK + 20


class In(BaseModel):
    rounds: int = 0


class Pr(BaseModel):
    pass


class Loop(Workflow[In, Pr]):
    """Goes round its one step ``rounds`` times, never waiting."""

    workflow_type = "t.streak.loop.v1"
    ran: ClassVar[list[str]] = []
    first: ClassVar[threading.Event] = threading.Event()
    go: ClassVar[threading.Event] = threading.Event()

    @step(initial=True, to=["spin", COMPLETED])
    def spin(self, ctx: StepContext[In, Pr]) -> str:
        if not Loop.first.is_set():
            Loop.first.set()
            Loop.go.wait(10)  # the urgent workflow is started while the first round runs
        # Progress is set-once: the rounds are counted here, one worker runs them all.
        done = sum(r.startswith("spin") for r in Loop.ran) + 1
        Loop.ran.append(f"spin{done}")
        return "spin" if done < ctx.input.rounds else COMPLETED


class Urgent(Workflow[In, Pr]):
    workflow_type = "t.streak.urgent.v1"

    @step(initial=True, to=COMPLETED)
    def now(self, ctx: StepContext[In, Pr]) -> None:
        Loop.ran.append("urgent")


def test_a_higher_priority_workflow_runs_after_one_streak_of_a_long_loop(store: Store) -> None:
    Loop.ran, Loop.first, Loop.go = [], threading.Event(), threading.Event()
    client = Client(store, [Loop, Urgent])
    # One worker: which step it runs next is decided by its commits and its claims alone.
    runner = Runner(store, [Loop, Urgent], options=RunnerOptions(concurrency=1, idle_poll=0.2))
    runner.start()
    try:
        loop_id = client.start(Loop, {"rounds": ROUNDS}, priority=100)
        assert Loop.first.wait(10)
        urgent_id = client.start(Urgent, {}, priority=0)
        Loop.go.set()
        assert client.wait(urgent_id, timeout=30).status.value == "COMPLETED"
        assert client.wait(loop_id, timeout=30).status.value == "COMPLETED"
    finally:
        Loop.go.set()
        runner.stop(timeout=10)

    assert Loop.ran == [
        *(f"spin{i}" for i in range(1, STREAK + 2)),  # the claimed round and STREAK more
        "urgent",  # then a claim, and the higher priority first
        *(f"spin{i}" for i in range(STREAK + 2, ROUNDS + 1)),
    ]
    # Handed back, not started: the step after the streak was started by a claim, once.
    starts = [e for e in client.history(loop_id) if e.event_type == Ev.STEP_STARTED]
    assert len(starts) == ROUNDS
    assert [e.attempt for e in starts] == list(range(1, ROUNDS + 1))
