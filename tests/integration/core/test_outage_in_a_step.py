"""The database going away under a step's own store call is not the step's failure.

``ctx.save`` during an outage raises ``StoreUnavailable`` inside the action. It used to
be classified like any exception of the action (a retryable failure, counted against the
retry budget); now the claim is handed back and the step, in doubt, runs again once the
database answers: no STEP_FAILED, no failure counted (issue 14).
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    Runner,
    RunnerOptions,
    Status,
    StepContext,
    Store,
    StoreUnavailable,
    Workflow,
    step,
)
from statemachine_wf.core.store import Commit
from statemachine_wf.definition.events import Ev


class Nothing(BaseModel):
    pass


class Saved(BaseModel):
    mark: int | None = None


class Saves(Workflow[Nothing, Saved]):
    workflow_type = "outage.saves.v1"

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[Nothing, Saved]) -> None:
        ctx.save(mark=ctx.attempt)


def test_an_outage_under_ctx_save_hands_the_step_back(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client(store, [Saves])
    instance_id = client.start(Saves, {})
    real_apply = store.apply
    outages = [StoreUnavailable("postgres: the database went away", lost=True)]

    def apply(commit: Commit) -> int:
        saving = any(e.event_type == Ev.PROGRESS_SET for e in commit.decision.events)
        if saving and outages:
            raise outages.pop()
        version: int = real_apply(commit)
        return version

    monkeypatch.setattr(store, "apply", apply)
    Runner(store, [Saves], options=RunnerOptions(concurrency=1)).run_until_idle(timeout=30)
    record = client.get(instance_id)
    assert record.status == Status.COMPLETED
    assert outages == []  # the outage happened
    types = [e.event_type for e in client.history(instance_id)]
    assert Ev.STEP_FAILED not in types
    assert types.count(Ev.STEP_STARTED) == 2  # run again as attempt 2 once the store answered
    assert record.progress == {"mark": 2}
    assert client.verify(instance_id) == {}
