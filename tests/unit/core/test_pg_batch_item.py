"""PostgreSQL's group commit encodes a decision's batch item in one go and checks it one
level deeper than a value alone (stores/_pggroup.py, ``_batch_item``). It must refuse
exactly what the decision sent alone refuses, with the same error, and send the same
values: compared here with the item made value by value, as a lone decision's ``dumps``
makes each (``_batch_item_by_value``). The server's side is
tests/integration/core/test_group_commit.py."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest

from statemachine_wf import DataRejected
from statemachine_wf.core import decide
from statemachine_wf.core.fold import Projection, apply_all
from statemachine_wf.core.store import Commit
from statemachine_wf.definition.events import Ev, NewEvent, Status
from statemachine_wf.definition.limits import MAX_STORED_DEPTH
from statemachine_wf.stores._pggroup import _batch_item, _batch_item_by_value

from .workflows import ThreeSteps

SPEC = ThreeSteps.spec()


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


def outcome(make: Any, commit: Commit) -> tuple[str, Any]:
    try:
        return "ok", json.loads(make(commit))
    except DataRejected as exc:
        return "refused", str(exc)


def commit_of(state: Projection, decision: decide.Decision) -> Commit:
    return Commit("01a24dc7-4538-73f2-9af4-91d6333e0741", 3, decision, "w1", 30.0, state.status)


CREATED = apply_all(Projection(), [NewEvent(Ev.CREATED, payload={"initial": "first"})])
DEPTHS = [MAX_STORED_DEPTH - 2, MAX_STORED_DEPTH - 1, MAX_STORED_DEPTH, MAX_STORED_DEPTH + 1]


@pytest.mark.parametrize(
    "progress",
    [
        {},
        {"b": "plain"},
        {"b": "a\x00b"},  # NUL
        {"b": "\ud800"},  # a lone surrogate
        {"b": math.nan},
        {"b": 10**5000},  # an integer no store keeps whole
        *({"b": nested(d)} for d in DEPTHS),
    ],
    ids=["empty", "plain", "nul", "surrogate", "nan", "huge-int", *(f"depth{d}" for d in DEPTHS)],
)
def test_a_batch_item_refuses_and_sends_what_a_lone_decision_does(progress: Any) -> None:
    state = dataclasses.replace(CREATED, progress=progress)
    for d in (
        decide.start(state, "first"),  # a Continue
        decide.success(SPEC, decide.start(state, "first").state, "first", 1, "second", {}),
    ):
        commit = commit_of(state, d)
        assert outcome(_batch_item, commit) == outcome(_batch_item_by_value, commit)


def saved(depth: int) -> Commit:
    """A progress save whose event's payload nests ``depth`` levels below ``progress``
    (the events sit four levels down: list, event, payload, progress)."""
    events = (NewEvent(Ev.PROGRESS_SET, "first", 1, {"progress": nested(depth)}),)
    return commit_of(CREATED, decide.Decision(events, CREATED, decide.KeepTask()))


EVENT_DEPTHS = range(MAX_STORED_DEPTH - 6, MAX_STORED_DEPTH - 1)


@pytest.mark.parametrize("depth", EVENT_DEPTHS)
def test_an_events_payload_at_the_limit_is_judged_alike(depth: int) -> None:
    commit = saved(depth)
    assert outcome(_batch_item, commit) == outcome(_batch_item_by_value, commit)


def test_the_refusals_are_there_to_compare() -> None:
    # Not vacuous: the limits fall inside the depths tried, for progress and for events.
    kept = outcome(_batch_item, commit_of(CREATED, decide.start(CREATED, "first")))
    deep = dataclasses.replace(CREATED, progress={"b": nested(MAX_STORED_DEPTH + 1)})
    refused = outcome(_batch_item, commit_of(deep, decide.start(deep, "first")))
    assert kept[0] == "ok"
    assert refused[0] == "refused"
    assert kept[1]["status"] == str(Status.RUNNING)
    judged = {outcome(_batch_item, saved(d))[0] for d in EVENT_DEPTHS}
    assert judged == {"ok", "refused"}  # the events' limit is inside EVENT_DEPTHS
