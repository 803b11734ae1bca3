"""The audit mapping: every event type is classified, and the names read as the seeds do."""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_wf.core.audit import DETAIL, LIFECYCLE, lifecycle, lifecycle_name
from statemachine_wf.definition.events import Ev, EventRecord


def _event(event_type: str, **payload: Any) -> EventRecord:
    return EventRecord(1, "i", event_type, "s", 1, payload, None, "w", 0.0)


@pytest.mark.parametrize("ev", list(Ev))
def test_every_event_type_is_a_lifecycle_event_or_named_detail(ev: Ev) -> None:
    # A new Ev member fails here until audit.py says what it is in the trail.
    assert (ev in LIFECYCLE) != (ev in DETAIL), f"{ev} must be in exactly one of the two"
    name = LIFECYCLE.get(ev) or DETAIL.get(ev)
    assert name
    assert name == name.lower()


def test_signal_and_wait_events_have_their_seed_names() -> None:
    assert lifecycle_name(_event(Ev.SIGNAL_RECEIVED)) == "signal received"
    assert lifecycle_name(_event(Ev.STALE_SIGNAL_DROPPED)) == "stale signal dropped"
    assert lifecycle_name(_event(Ev.TIMER_FIRED)) == "timer fired"
    assert lifecycle_name(_event(Ev.SIGNAL_REJECTED)) == "signal rejected"
    assert lifecycle_name(_event(Ev.STEP_WAITING, kind="signal")) == "waiting"
    assert lifecycle_name(_event(Ev.NODE_WAITING)) == "waiting"
    # The token reserved mid-step is detail: the STEP_WAITING after it is the wait.
    assert lifecycle_name(_event(Ev.WAIT_TOKEN)) is None


def test_failures_are_named_by_outcome_and_unknown_types_are_skipped() -> None:
    assert lifecycle_name(_event(Ev.STEP_FAILED, outcome="retry")) == "retried"
    assert lifecycle_name(_event(Ev.STEP_FAILED, outcome="stall")) == "retried"
    assert lifecycle_name(_event(Ev.NODE_FAILED, outcome="fail")) == "failed"
    assert lifecycle_name(_event(Ev.RECONCILE_FAILED)) is None  # no outcome: detail
    trail = [_event(Ev.CREATED), _event("FROM_A_NEWER_VERSION"), _event(Ev.STEP_COMPLETED)]
    assert [name for name, _ in lifecycle(trail)] == ["created"]
