"""A step quarantined mid-attempt stays in doubt: a redrive asks the reconcile hook first.

Before: quarantine cleared the task's in-flight flag, so redriving an instance set aside
while its step was running (the database refused the outcome it was writing, say) ran
the step again without asking the hook whether its effect had already happened.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    ReconcileContext,
    Reconciliation,
    Runner,
    RunnerOptions,
    Status,
    StepContext,
    Store,
    Workflow,
    reconcile,
    step,
)
from statemachine_wf.definition.events import Ev


class In(BaseModel):
    n: int = 1


class Out(BaseModel):
    pass


class Doubt(Workflow[In, Out]):
    workflow_type = "t.quarantine.doubt.v1"
    paid: list[int]
    asked: list[tuple[str, bool]]

    @step(initial=True, to=COMPLETED)
    def pay(self, ctx: StepContext[In, Out]) -> None:
        self.paid.append(ctx.attempt)

    @reconcile
    def check(self, ctx: ReconcileContext[In, Out]) -> Reconciliation:
        self.asked.append((ctx.step, ctx.in_doubt))
        return ctx.unchanged()


def test_a_redriven_quarantine_asks_the_hook_before_running_the_step_again(
    store: Store,
) -> None:
    client = Client(store, [Doubt])
    iid = client.start(Doubt, In())
    [claim] = store.claim(worker="w1", types=[Doubt.workflow_type], lease=30)
    assert claim.started  # STEP_STARTED(pay, 1) is logged: the attempt is under way
    store.quarantine(iid, reason="the database refused the instance's data", worker="w1")

    task = store.task(iid)
    assert task is not None
    assert task.in_flight, "still in doubt after the quarantine"
    assert store.claim_instance(iid, worker="w2", lease=30) is None, "set aside until redriven"

    [letter] = client.dead_letters()
    assert client.redrive(int(letter["id"])).action == "resumed"
    deps: dict[str, Any] = {"paid": [], "asked": []}
    Runner(
        store, [Doubt], options=RunnerOptions(concurrency=1, idle_poll=0.2), dependencies=deps
    ).run_until_idle(timeout=20)

    assert deps["asked"] == [("pay", True)], "the hook is asked first"
    assert deps["paid"] == [2], "then the step runs again, once"
    assert client.get(iid).status == Status.COMPLETED
    kinds = [e.event_type for e in client.history(iid)]
    assert kinds.index(Ev.RECONCILED) < len(kinds) - 1 - kinds[::-1].index(Ev.STEP_STARTED)
