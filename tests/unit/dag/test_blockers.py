"""``dag_vouch.blockers``: which open node tasks vouch for a decision on a later
version of its instance. Only a plain completion outside loops qualifies; its blockers
are the open inputs of the one ``all`` join it feeds, or any other open task when it
feeds none that is still to be entered."""

from __future__ import annotations

from collections.abc import Sequence

from statemachine_wf.core import dag_interpret as interpret
from statemachine_wf.core import dag_vouch
from statemachine_wf.core.dag_interpret import DagDecision, LogView, NodeOutcome
from statemachine_wf.definition.dag_models import Graph, check
from statemachine_wf.definition.events import Ev, NewEvent, Status
from tests.integration.dag.helpers import diamond, fan_out, loop

from .test_node_finished import _log

FAN = check(fan_out(3))  # s -> b0, b1, b2 -> e


def _fanned(graph: Graph, *more: NewEvent) -> LogView:
    return _log(
        graph,
        NewEvent(Ev.NODE_COMPLETED, "s", 1, {"output": {"x": 1}, "var": "s"}),
        *(NewEvent(Ev.NODE_DISPATCHED, f"b{i}", 1, {"via": "entry"}) for i in range(3)),
        *more,
    )


def _finished(graph: Graph, view: LogView, node: str, open_slots: Sequence[str]) -> DagDecision:
    decision = interpret.node_finished(
        graph, view, node, view.run(node), NodeOutcome(1), attempt=1,
        status=Status.RUNNING, open_slots=open_slots,
    )  # fmt: skip
    assert decision is not None
    return decision


def test_a_branch_into_a_waiting_join_names_the_join_s_other_open_inputs() -> None:
    view = _fanned(FAN)
    decision = _finished(FAN, view, "b1", ("b0", "b1", "b2"))
    assert decision.dispatch == ()
    assert dag_vouch.blockers(FAN, view, decision, ("b0", "b1", "b2")) == ("b0", "b2")


def test_the_branch_that_opens_the_join_has_none() -> None:
    view = _fanned(
        FAN,
        NewEvent(Ev.NODE_COMPLETED, "b0", 1, {"output": 1, "var": "b0"}),
        NewEvent(Ev.NODE_COMPLETED, "b2", 1, {"output": 1, "var": "b2"}),
    )
    decision = _finished(FAN, view, "b1", ("b1",))
    assert [t.node for t in decision.dispatch] == ["e"]
    assert dag_vouch.blockers(FAN, view, decision, ("b1",)) == ()


def test_an_open_task_that_is_no_input_of_the_join_vouches_for_nothing() -> None:
    view = _fanned(FAN)
    decision = _finished(FAN, view, "b1", ("b0", "b1", "b2", "x"))
    assert dag_vouch.blockers(FAN, view, decision, ("b1", "x")) == ()


def test_a_branch_into_an_any_join_already_entered_names_every_other_open_task() -> None:
    graph = check(diamond("any"))  # s -> a -> (l, r) -> d (any) -> e
    view = _log(
        graph,
        NewEvent(Ev.NODE_COMPLETED, "s", 1, {"output": {}, "var": "s"}),
        NewEvent(Ev.NODE_DISPATCHED, "a", 1, {"via": "entry"}),
        NewEvent(Ev.NODE_COMPLETED, "a", 1, {"output": "a", "var": "a"}),
        NewEvent(Ev.NODE_DISPATCHED, "l", 1, {"via": "entry"}),
        NewEvent(Ev.NODE_DISPATCHED, "r", 1, {"via": "entry"}),
        NewEvent(Ev.NODE_COMPLETED, "l", 1, {"output": "l", "var": "l"}),
        NewEvent(Ev.NODE_DISPATCHED, "d", 1, {"via": "entry"}),
    )
    decision = _finished(graph, view, "r", ("d", "r"))
    assert decision.dispatch == ()  # d fired already
    assert dag_vouch.blockers(graph, view, decision, ("d", "r")) == ("d",)


def test_a_decision_that_dispatches_or_settles_has_none() -> None:
    view = _fanned(FAN)
    start = _finished(FAN, _log(FAN), "s", ("s",))
    assert start.dispatch
    assert dag_vouch.blockers(FAN, _log(FAN), start, ("s",)) == ()
    settled = DagDecision(
        events=(NewEvent(Ev.NODE_COMPLETED, "b1", 1, {"output": 1}),),
        done="b1",
        status=Status.FAILED,
        finish=True,
    )
    assert dag_vouch.blockers(FAN, view, settled, ("b0", "b1", "b2")) == ()


def test_nothing_inside_a_loop_qualifies() -> None:
    graph = check(loop())
    inside = [n for n in graph.nodes if graph.scope[n] is not None]
    assert inside
    for node in inside:
        decision = DagDecision(
            events=(NewEvent(Ev.NODE_COMPLETED, node, 1, {"output": 1}),), done=node
        )
        assert dag_vouch.blockers(graph, _log(graph), decision, (node, "other")) == ()
