"""``interpret.node_finished``: a node run's result and what follows, as one pure decision."""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_wf.core import dag_interpret as interpret
from statemachine_wf.core.dag_interpret import LogView, NodeOutcome
from statemachine_wf.definition.dag_models import Graph, check
from statemachine_wf.definition.events import Ev, EventRecord, NewEvent, Status
from tests.integration.dag.helpers import fan_out, linear

GRAPH = check(linear(1))  # s -> n0 -> e


def _log(graph: Graph, *events: NewEvent) -> LogView:
    created = {"input": {"x": 1}, "dag": graph.definition.dump()}
    records = [
        EventRecord(
            seq, "i", str(e.event_type), e.node, e.attempt, dict(e.payload), e.error, None, 0.0
        )
        for seq, e in enumerate([*interpret.start_events(graph, created), *events], start=1)
    ]
    return LogView.of(records)


def test_the_result_comes_first_then_the_successor_is_dispatched() -> None:
    view = _log(GRAPH)
    decision = interpret.node_finished(
        GRAPH, view, "s", 1, NodeOutcome({"x": 1}), attempt=1,
        status=Status.RUNNING, open_slots=("s",),
    )  # fmt: skip
    assert decision is not None
    first, *rest = decision.events
    assert (first.event_type, first.node, first.attempt) == (Ev.NODE_COMPLETED, "s", 1)
    assert first.payload == {"output": {"x": 1}, "handle": None, "var": "s", "try": 1}
    assert [(e.event_type, e.node) for e in rest] == [(Ev.NODE_DISPATCHED, "n0")]
    assert [t.node for t in decision.dispatch] == ["n0"]
    assert decision.done == "s"
    assert view.completion("s", 1) is None  # the caller's view is not changed


def test_the_last_node_completes_the_instance_with_the_end_output() -> None:
    view = _log(
        GRAPH,
        NewEvent(Ev.NODE_COMPLETED, "s", 1, {"output": {"x": 1}, "var": "s"}),
        NewEvent(Ev.NODE_DISPATCHED, "n0", 1, {"via": "s"}),
        NewEvent(Ev.NODE_COMPLETED, "n0", 1, {"output": 2, "var": "n0"}),
        NewEvent(Ev.NODE_DISPATCHED, "e", 1, {"via": "n0"}),
    )
    decision = interpret.node_finished(
        GRAPH, view, "e", 1, NodeOutcome({"result": 2}), attempt=1,
        status=Status.RUNNING, open_slots=("e",),
    )  # fmt: skip
    assert decision is not None
    assert decision.finish
    assert decision.status == Status.COMPLETED
    assert decision.output == {"output": {"result": 2}}
    assert [e.event_type for e in decision.events] == [Ev.NODE_COMPLETED, Ev.COMPLETED]


def test_nothing_to_write_when_over_scheduled_elsewhere_or_recorded_already() -> None:
    view = _log(GRAPH)
    over = interpret.node_finished(
        GRAPH, view, "s", 1, NodeOutcome({}), attempt=1,
        status=Status.CANCELLED, open_slots=("s",),
    )  # fmt: skip
    gone = interpret.node_finished(
        GRAPH, view, "s", 1, NodeOutcome({}), attempt=1,
        status=Status.RUNNING, open_slots=(),
    )  # fmt: skip
    recorded = _log(GRAPH, NewEvent(Ev.NODE_COMPLETED, "s", 1, {"output": {}, "var": "s"}))
    duplicate = interpret.node_finished(
        GRAPH, recorded, "s", 1, NodeOutcome({"other": True}), attempt=2,
        status=Status.RUNNING, open_slots=("s",),
    )  # fmt: skip
    assert (over, gone, duplicate) == (None, None, None)


def test_a_delay_and_an_error_handle_are_recorded_and_the_delay_reaches_the_tasks() -> None:
    graph = check(fan_out(2))
    view = _log(graph)
    decision = interpret.node_finished(
        graph, view, "s", 1, NodeOutcome({"x": 1}, delay=5.0, error=True), attempt=3,
        status=Status.RUNNING, open_slots=("s",),
    )  # fmt: skip
    assert decision is not None
    assert decision.events[0].payload["delay"] == 5.0
    assert decision.events[0].payload["error"] is True
    assert decision.events[0].payload["try"] == 3
    assert sorted(t.node for t in decision.dispatch) == ["b0", "b1"]
    assert {t.delay for t in decision.dispatch} == {5.0}


def test_retries_run_out_is_a_dead_letter_and_a_fail_after_retries_is_not() -> None:
    """A node that kept failing retryably is poison (dead-lettered, "retries exhausted");
    a node that fails with a non-retryable error after earlier retryable failures has
    said what it is: FAILED with its own message, no dead letter, retries never ran out."""
    policy = GRAPH.nodes["n0"].retry_policy()
    last = policy.max_attempts - 1  # failures before the last allowed try
    ran_out = interpret.failed(
        GRAPH, "n0", 1, {"message": "flaky"},
        failures=last, retryable=True, status=Status.RUNNING,
    )  # fmt: skip
    assert ran_out is not None
    assert ran_out.status == Status.FAILED
    assert ran_out.dead_letter == f"node 'n0': retries exhausted after {last + 1} failures: flaky"
    assert Ev.DEAD_LETTERED in [e.event_type for e in ran_out.events]
    said = interpret.failed(
        GRAPH, "n0", 1, {"message": "refused"},
        failures=1, retryable=False, status=Status.RUNNING,
    )  # fmt: skip
    assert said is not None
    assert said.status == Status.FAILED
    assert said.dead_letter is None
    assert said.error is not None
    assert said.error["message"] == "refused"
    assert Ev.DEAD_LETTERED not in [e.event_type for e in said.events]


def test_a_wide_join_looks_at_one_edge_per_branch_finished_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The barrier checks the join's edges from the last back and stops at the first not
    # fired: branches that finish in the order they were dispatched cost one check each,
    # not one per branch before them (quadratic in the join's width).
    graph = check(fan_out(40))
    checked: list[str] = []
    fired = LogView.fired

    def counting(self: LogView, edge: Any, since: int) -> bool:
        checked.append(edge.source)
        return fired(self, edge, since)

    monkeypatch.setattr(LogView, "fired", counting)
    view = _log(graph)
    per_branch = []
    for i in range(40):
        node = f"b{i}"
        view.committed([NewEvent(Ev.NODE_COMPLETED, node, 1, {"output": i})], [view.top_seq + 1])
        checked.clear()
        assert interpret.ready(graph, view, "e") == ("entry" if i == 39 else None)
        per_branch.append(len(checked))
    assert per_branch[:-1] == [1] * 39  # b39 is not in yet: the first edge looked at
    assert per_branch[-1] == 40  # the last branch: every edge, once
