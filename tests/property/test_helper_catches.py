"""A test that cannot fail is a defect: the helper must report broken workflows and a
store that breaks the runtime's guarantees."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from pydantic import BaseModel

from statemachine_wf.core.decide import Decision
from statemachine_wf.core.store import Commit, Store
from statemachine_wf.definition.events import Ev, NewEvent
from statemachine_wf.definition.workflow import COMPLETED, Workflow, step
from statemachine_wf.runtime.context import StepContext
from statemachine_wf.testing import InvariantViolation, check_workflow, sqlite_store

from .workflows import Order, charged_once, order_world

FAST = settings(
    max_examples=150,
    derandomize=True,  # the same examples every run: these tests must not flake
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    suppress_health_check=list(HealthCheck),
    stateful_step_count=20,
    phases=[Phase.generate],  # finding is the point here; shrinking would only cost time
)


class In(BaseModel):
    n: int = 0


class Prog(BaseModel):
    token: str | None = None
    done: bool | None = None


class UndeclaredTarget(Workflow[In, Prog]):
    workflow_type = "broken.target.v1"

    @step(initial=True, to="finish")
    def begin(self, ctx: StepContext[In, Prog]) -> str:
        return "finish" if ctx.input.n % 2 == 0 else "somewhere_else"

    @step(to=COMPLETED)
    def finish(self, ctx: StepContext[In, Prog]) -> None:
        return None


class NewTokenEachAttempt(Workflow[In, Prog]):
    """Saves a value that depends on the attempt: a rerun changes a set-once field."""

    workflow_type = "broken.token.v1"

    @step(initial=True, to=COMPLETED)
    def issue(self, ctx: StepContext[In, Prog]) -> None:
        ctx.save(token=f"tok-{ctx.attempt}")


class ChargeWithoutWriteAhead(Order):
    """Opens a fresh charge each attempt and records it only with the completion."""

    workflow_type = "broken.order.v1"

    @step(initial=True, to="ship")
    def charge(self, ctx: StepContext[Any, Any]) -> None:
        charge_id = f"ch_{ctx.input.order_id}_{ctx.attempt}"
        self.bank.intents[charge_id] = ctx.input.amount
        self.bank.capture(charge_id)
        ctx.set(charge_id=charge_id)


def test_an_undeclared_target_is_reported() -> None:
    with pytest.raises(InvariantViolation, match="undeclared_transition"):
        check_workflow(UndeclaredTarget, settings=FAST)


def test_a_rerun_that_changes_progress_is_reported() -> None:
    # Either as the set-once conflict of the rerun's save, or as the divergence of the
    # token from the one an uncrashed run gets: both point at the attempt-dependent value.
    with pytest.raises(InvariantViolation, match=r"ProgressConflict|uncrashed run"):
        check_workflow(NewTokenEachAttempt, settings=FAST)


def test_a_side_effect_without_write_ahead_is_caught_by_the_author_check() -> None:
    with pytest.raises(AssertionError, match="charged more than once"):
        check_workflow(
            ChargeWithoutWriteAhead,
            dependencies=order_world,
            check=charged_once,
            compare=False,  # the divergence check alone catches it too (charge ids differ)
            settings=FAST,
        )


# -- stores that break a guarantee ----------------------------------------------------------
class Wrapper:
    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.dialect = inner.dialect

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class DropsSaves(Wrapper):
    """Loses PROGRESS_SET events but still updates the row: the log is no longer the truth."""

    def apply(self, commit: Commit) -> int:
        events = tuple(e for e in commit.decision.events if e.event_type != Ev.PROGRESS_SET)
        return self.inner.apply(
            dataclasses.replace(
                commit, decision=dataclasses.replace(commit.decision, events=events)
            )
        )


class IgnoresVersion(Wrapper):
    """Applies a decision at whatever version the row has now: no compare-and-swap."""

    def apply(self, commit: Commit) -> int:
        record = self.inner.get(commit.instance_id)
        assert record is not None
        return self.inner.apply(dataclasses.replace(commit, version=record.version))


class RewritesProgress(Wrapper):
    """Overwrites an already-set progress field on every completion (log and row alike)."""

    def apply(self, commit: Commit) -> int:
        d = commit.decision
        if d.state.progress.get("charge_id") and any(
            e.event_type == Ev.STEP_COMPLETED for e in d.events
        ):
            changed = {"charge_id": "ch_rewritten"}
            events = tuple(
                NewEvent(
                    e.event_type,
                    e.node,
                    e.attempt,
                    {**e.payload, "progress": {**e.payload.get("progress", {}), **changed}},
                    e.error,
                )
                if e.event_type == Ev.STEP_COMPLETED
                else e
                for e in d.events
            )
            state = dataclasses.replace(d.state, progress={**d.state.progress, **changed})
            commit = dataclasses.replace(commit, decision=Decision(events, state, d.task))
        return self.inner.apply(commit)


@pytest.mark.parametrize(
    ("wrapper", "message"),
    [
        (DropsSaves, "fold\\(log\\) != stored row"),
        (IgnoresVersion, "duplicate delivery"),
        (RewritesProgress, "set-once progress 'charge_id'|progress field 'charge_id' changed"),
    ],
)
def test_a_store_that_breaks_a_guarantee_is_caught(wrapper: type[Wrapper], message: str) -> None:
    with pytest.raises(InvariantViolation, match=message):
        check_workflow(
            Order,
            dependencies=order_world,
            store=lambda path: wrapper(sqlite_store(path)),
            settings=FAST,
        )
