"""The pure core: decisions and the fold agree, set-once progress, retry policy."""

from __future__ import annotations

import pytest

from statemachine_wf import Fail, ProgressConflict, Retry, RetryPolicy, Stall
from statemachine_wf.core import decide
from statemachine_wf.core.decide import Continue, Finish, Reschedule
from statemachine_wf.core.fold import Projection, apply_all, fold
from statemachine_wf.core.progress import merge_progress
from statemachine_wf.definition.events import Ev, EventRecord, NewEvent, Status

from .workflows import CountProgress, ThreeSteps

SPEC = ThreeSteps.spec()


def created() -> Projection:
    return apply_all(Projection(), [NewEvent(Ev.CREATED, payload={"initial": "first"})])


def records(events: list[NewEvent]) -> list[EventRecord]:
    return [
        EventRecord(i, "x", str(e.event_type), e.node, e.attempt, e.payload, e.error, None, 0.0)
        for i, e in enumerate(events, 1)
    ]


def test_happy_path_decisions_fold_to_the_same_projection() -> None:
    log = [NewEvent(Ev.CREATED, payload={"initial": "first"})]
    state = created()
    d = decide.start(state, "first")
    assert d.task == Continue("first", 1)
    log += d.events
    d = decide.success(SPEC, d.state, "first", 1, "second", {"a": 1})
    assert [e.event_type for e in d.events] == [Ev.STEP_COMPLETED, Ev.STEP_STARTED]
    assert d.task == Continue("second", 1)
    log += d.events
    d = decide.success(SPEC, d.state, "second", 1, None, {"b": "1"})  # single target implied
    log += d.events
    d = decide.success(SPEC, d.state, "third", 1, "COMPLETED", {"c": True})
    log += d.events
    assert d.task == Finish()
    assert d.state.status == Status.COMPLETED
    assert fold(records(log)) == d.state
    assert d.state.progress == {"a": 1, "b": "1", "c": True}


def test_undeclared_transition_fails_with_code() -> None:
    state = decide.start(created(), "first").state
    d = decide.success(SPEC, state, "first", 1, "third", {})
    assert d.state.status == Status.FAILED
    assert d.state.error is not None
    assert d.state.error["code"] == "undeclared_transition"
    assert d.task == Finish()


def test_retry_then_exhausted_stalls_by_default() -> None:
    state = decide.start(created(), "first").state
    d = decide.failure(SPEC, state, "first", 1, Retry, TimeoutError("slow"), failures=0)
    assert isinstance(d.task, Reschedule)
    assert d.task.failures == 1
    assert d.state.status == Status.RUNNING
    d = decide.failure(SPEC, state, "first", 5, Retry, TimeoutError("slow"), failures=4)
    assert d.state.status == Status.STALLED
    assert d.state.error is not None
    assert "retries exhausted" in d.state.error["message"]


def test_stall_and_fail_classification() -> None:
    state = decide.start(created(), "first").state
    stalled = decide.failure(SPEC, state, "first", 1, Stall, Stall("no funds", retry_in=7), 0)
    assert stalled.state.status == Status.STALLED
    assert isinstance(stalled.task, Reschedule)
    assert stalled.task.delay == 7
    failed = decide.failure(SPEC, state, "first", 1, Fail, Fail("bad", code="revert"), 0)
    assert failed.state.status == Status.FAILED
    assert failed.task == Finish()
    assert failed.state.error == {
        "step": "first",
        "code": "revert",
        "message": "bad",
        "type": "statemachine_wf.errors.Fail",
        "recoverable": False,
    }


def test_attempt_numbers_never_repeat_within_a_run() -> None:
    state = created()
    d1 = decide.start(state, "first")
    d2 = decide.failure(SPEC, d1.state, "first", 1, Retry, OSError(), 0)
    d3 = decide.start(d2.state, "first")
    assert d3.task == Continue("first", 2)


def test_set_once_progress() -> None:
    merged = merge_progress(CountProgress, {}, {"a": 1})
    assert merged == {"a": 1}
    assert merge_progress(CountProgress, merged, {"a": 1}) == {"a": 1}  # same value: fine
    with pytest.raises(ProgressConflict, match="already set to 1"):
        merge_progress(CountProgress, merged, {"a": 2})


def test_cancel_requested_stops_at_the_next_boundary() -> None:
    state = decide.start(created(), "first").state
    requested = decide.cancel(state, leased=True).state
    assert requested.cancel_requested
    assert requested.status == Status.RUNNING
    d = decide.success(SPEC, requested, "first", 1, "second", {})
    assert d.events[-1].event_type == Ev.CANCELLED
    assert d.task == Finish()


def test_retry_policy_waits() -> None:
    policy = RetryPolicy(jitter=False)
    assert [policy.delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 32, 60]
    jittered = RetryPolicy()
    assert all(2 <= jittered.delay(2) <= 3 for _ in range(50))
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


def test_a_steps_hot_events_keep_every_field_they_do_not_change() -> None:
    # apply() builds the projection of STEP_STARTED and STEP_COMPLETED naming every field
    # (dataclasses.replace cost twice as much on a step's path): a field added to
    # Projection must be named there too, or these events would reset it to its default.
    from dataclasses import fields, replace

    from statemachine_wf.core.fold import apply

    assert [f.name for f in fields(Projection)] == [
        "status", "step", "step_attempts", "in_flight", "progress", "error",
        "cancel_requested", "attempts", "waits", "waiting",
    ], "a new Projection field: name it in fold.apply (STEP_STARTED, STEP_COMPLETED)"  # fmt: skip
    busy = Projection(
        status=Status.RUNNING, step="first", step_attempts=2, in_flight=False,
        progress={"a": 1}, error={"code": "x"}, cancel_requested=True,
        attempts={"first": 2, "second": 4}, waits={"k": {"kind": "timer"}}, waiting="k",
    )  # fmt: skip
    started = apply(busy, NewEvent(Ev.STEP_STARTED, "second", 5))
    assert started == replace(
        busy, step="second", step_attempts=5, in_flight=True,
        attempts={"first": 2, "second": 5},
    )  # fmt: skip
    moved = apply(
        started, NewEvent(Ev.STEP_COMPLETED, "second", 5, {"progress": {"b": 2}, "to": "first"})
    )
    assert moved == replace(
        started, step="first", step_attempts=2, in_flight=False, progress={"a": 1, "b": 2},
        error=None, waits={}, waiting=None,
    )  # fmt: skip
    done = apply(started, NewEvent(Ev.STEP_COMPLETED, "second", 5, {"to": "COMPLETED"}))
    assert done == replace(started, in_flight=False, error=None, waits={}, waiting=None)
