"""``core.dag_group``: which completions of one instance may share a commit, each decided
on the view with the ones before it folded in, and the one decision they make together."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from statemachine_wf.core import dag_interpret as interpret
from statemachine_wf.core.dag_group import decide, joins, merge
from statemachine_wf.core.dag_interpret import DagDecision, LogView, NodeOutcome, TaskRetry
from statemachine_wf.definition.dag_models import check
from statemachine_wf.definition.events import Ev, NewEvent, Status
from tests.integration.dag.helpers import fan_out

from .test_blockers import _fanned

FAN = check(fan_out(3))  # s -> b0, b1, b2 -> e
OPEN = ("b0", "b1", "b2")


def _make(node: str) -> Any:
    def made(slots: tuple[str, ...], v: LogView) -> DagDecision | None:
        return interpret.node_finished(
            FAN, v, node, v.run(node), NodeOutcome(node), attempt=1,
            status=Status.RUNNING, open_slots=slots,
        )  # fmt: skip

    return made


def test_the_last_branch_of_a_group_sees_the_others_and_dispatches_the_join() -> None:
    view = _fanned(FAN)
    group = decide([(n, _make(n)) for n in OPEN], OPEN, view, 32)
    assert [n for n, _ in group] == list(OPEN)
    first, second, last = (d for _, d in group)
    assert first.dispatch == second.dispatch == ()
    assert [t.node for t in last.dispatch] == ["e"]  # b0 and b1 completed before it
    merged = merge([first, second, last])
    assert (merged.done, merged.also_done) == ("b0", ("b1", "b2"))
    assert [(e.event_type, e.node) for e in merged.events] == [
        (Ev.NODE_COMPLETED, "b0"),
        (Ev.NODE_COMPLETED, "b1"),
        (Ev.NODE_COMPLETED, "b2"),
        (Ev.NODE_DISPATCHED, "e"),
    ]
    assert interpret.open_after(OPEN, merged) == ("e",)
    assert view.completion("b0", 1) is None  # the cached view is not touched


def test_a_group_stops_at_its_cap_and_before_a_completion_that_writes_nothing() -> None:
    view = _fanned(FAN)
    assert [n for n, _ in decide([(n, _make(n)) for n in OPEN], OPEN, view, 2)] == [
        "b0",
        "b1",
    ]
    # b1 twice (a duplicate delivery): the second writes nothing, and the group ends
    # before it (it is decided again alone, after the group's commit).
    items = [("b0", _make("b0")), ("b1", _make("b1")), ("b1'", _make("b1")), ("b2", _make("b2"))]
    assert [n for n, _ in decide(items, OPEN, view, 32)] == ["b0", "b1"]


def test_a_group_ends_after_a_completion_that_dispatches() -> None:
    view = _fanned(FAN, NewEvent(Ev.NODE_COMPLETED, "b0", 1, {"output": 1, "var": "b0"}))
    items = [(n, _make(n)) for n in ("b1", "b2")]
    group = decide(items, ("b1", "b2"), view, 32)
    assert [n for n, _ in group] == ["b1", "b2"]  # b2 dispatches the join: the last one
    view = _fanned(
        FAN,
        NewEvent(Ev.NODE_COMPLETED, "b0", 1, {"output": 1, "var": "b0"}),
        NewEvent(Ev.NODE_COMPLETED, "b1", 1, {"output": 1, "var": "b1"}),
    )
    never = pytest.fail  # nothing is decided after the completion that dispatched
    items = [("b2", _make("b2")), ("x", lambda s, v: never("decided after a dispatch"))]
    assert [n for n, _ in decide(items, ("b2",), view, 32)] == ["b2"]


def test_only_a_plain_completion_and_what_follows_joins_a_group() -> None:
    view = _fanned(FAN)
    plain = _make("b0")(OPEN, view)
    assert plain is not None
    assert joins(plain)
    assert not joins(replace(plain, retry=TaskRetry("b0", 1.0, 1)))
    assert not joins(replace(plain, status=Status.FAILED))
    assert not joins(replace(plain, finish=True))
    assert not joins(replace(plain, dead_letter="retries exhausted"))
    assert not joins(replace(plain, also_done=("b1",)))  # a group already
    waiting = DagDecision(events=(NewEvent(Ev.NODE_WAITING, "b0", None, {"run": 1}),), done="b0")
    assert not joins(waiting)
