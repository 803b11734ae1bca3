"""The pure core keeps a step in doubt until a reconcile hook call succeeds."""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel

from statemachine_wf import COMPLETED, Fail, Retry, Snooze, Stall, StepContext, Workflow, step
from statemachine_wf.core import decide
from statemachine_wf.core.decide import Continue, Finish, Reschedule
from statemachine_wf.core.fold import Projection, apply_all
from statemachine_wf.definition.events import Ev, NewEvent, Status
from statemachine_wf.definition.workflow import reconcile
from statemachine_wf.runtime.context import ReconcileContext, Reconciliation


class In(BaseModel):
    pass


class Pr(BaseModel):
    paid: bool = False


class Pay(Workflow[In, Pr]):
    workflow_type = "t.indoubt.v1"

    @step(initial=True, to=COMPLETED)
    def pay(self, ctx: StepContext[In, Pr]) -> None:
        return None

    @reconcile
    def check(self, ctx: ReconcileContext[In, Pr]) -> Reconciliation:
        return ctx.unchanged()


SPEC = Pay.spec()


def crashed_mid_step() -> Projection:
    """Started, saved progress, then its runner vanished: the task is still in flight."""
    events = [
        NewEvent(Ev.CREATED, payload={"initial": "pay"}),
        NewEvent(Ev.STEP_STARTED, "pay", 1),
        NewEvent(Ev.PROGRESS_SET, "pay", 1, {"progress": {"paid": True}}),
    ]
    return replace(apply_all(Projection(), events), in_flight=True)


def claimed(state: Projection, task: Reschedule) -> Projection:
    """The projection the next claim sees: the row, with the task's in-flight flag."""
    return replace(state, in_flight=task.in_doubt)


def test_a_failing_hook_leaves_the_step_in_doubt() -> None:
    state = crashed_mid_step()
    assert state.in_doubt
    d = decide.failure(SPEC, state, "pay", 1, Retry, RuntimeError("down"), 0, in_doubt=True)
    assert isinstance(d.task, Reschedule)
    assert d.task.in_doubt  # the task keeps its in-flight flag: the hook is asked next
    (failed,) = d.events
    assert failed.event_type == Ev.STEP_FAILED
    assert failed.payload["in_doubt"] is True
    assert failed.error is not None
    assert failed.error["in_doubt"] is True
    assert not d.state.in_flight  # the runner holds nothing to run now
    assert claimed(d.state, d.task).in_doubt


def test_a_stalling_or_snoozing_hook_leaves_the_step_in_doubt() -> None:
    state = crashed_mid_step()
    stalled = decide.failure(SPEC, state, "pay", 1, Stall, Stall("later"), 0, in_doubt=True)
    assert stalled.state.status == Status.STALLED
    assert isinstance(stalled.task, Reschedule)
    assert stalled.task.in_doubt
    # Resumed by hand, even with the task's flag lost, the error still says so.
    resumed = decide.resume(stalled.state)
    assert isinstance(resumed.task, Reschedule)
    assert resumed.task.in_doubt
    snoozed = decide.failure(SPEC, state, "pay", 1, Retry, Snooze(1.0, "wait"), 0, in_doubt=True)
    assert isinstance(snoozed.task, Reschedule)
    assert snoozed.task.in_doubt


def test_a_failed_in_doubt_step_retried_by_hand_is_still_in_doubt() -> None:
    state = crashed_mid_step()
    policy_fail = decide.failure(
        SPEC, state, "pay", 1, Retry, RuntimeError("down"), 99, in_doubt=True
    )
    # Exhausted retries stall by default; a Fail-classified hook error fails.
    assert isinstance(policy_fail.task, Reschedule)
    failed = decide.failure(SPEC, state, "pay", 1, Fail, Fail("no"), 0, in_doubt=True)
    assert isinstance(failed.task, Finish)
    assert failed.state.status == Status.FAILED
    retried = decide.retry(replace(failed.state, in_flight=False))  # its task is gone
    assert isinstance(retried.task, Reschedule)
    assert retried.task.in_doubt


def test_a_successful_hook_settles_the_doubt() -> None:
    state = crashed_mid_step()
    first = decide.failure(SPEC, state, "pay", 1, Retry, RuntimeError("down"), 0, in_doubt=True)
    assert isinstance(first.task, Reschedule)
    again = claimed(first.state, first.task)
    done = decide.reconciled(
        SPEC, again, "pay", 1, ReconcileContext.complete(paid=True), in_doubt=True, failures=1
    )
    assert isinstance(done.task, Finish)
    assert not done.state.in_doubt
    rerun = decide.reconciled(
        SPEC, again, "pay", 1, ReconcileContext.rerun(), in_doubt=True, failures=1
    )
    assert isinstance(rerun.task, Continue)
    assert rerun.task.attempt == 2


def test_an_ordinary_failure_is_not_in_doubt() -> None:
    state = crashed_mid_step()
    d = decide.failure(SPEC, state, "pay", 1, Retry, RuntimeError("down"), 0)
    assert isinstance(d.task, Reschedule)
    assert not d.task.in_doubt
    assert "in_doubt" not in d.events[0].payload
    assert not claimed(d.state, d.task).in_doubt


def test_an_attempt_handed_back_unrun_is_not_in_doubt_and_stays_counted() -> None:
    """STEP_RELEASED: the claim that started the attempt was handed back before any worker
    ran it. The fold clears the in-flight mark (nothing for the hook to judge) and keeps
    the attempt, so the next start is attempt 2."""
    events = [
        NewEvent(Ev.CREATED, payload={"initial": "pay"}),
        NewEvent(Ev.STEP_STARTED, "pay", 1),
        NewEvent(Ev.STEP_RELEASED, "pay", 1, {"reason": "handed back before it ran"}),
    ]
    state = apply_all(Projection(), events)
    assert (state.in_flight, state.in_doubt, state.status) == (False, False, Status.RUNNING)
    assert state.attempts == {"pay": 1}
    d = decide.start(state, "pay")
    assert [(e.event_type, e.attempt) for e in d.events] == [(Ev.STEP_STARTED, 2)]
