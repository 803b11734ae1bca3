"""The interpreter's view of a log answers from indexes kept as events are folded in, so a
decision costs the same at a loop's 400th iteration as at its 20th; the answers are
those of scanning the log, however the view was built (read at once, extended in
pieces, or copied with a completion folded in)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from statemachine_wf.core import dag_interpret as it
from statemachine_wf.core.dag_interpret import LogView, NodeOutcome
from statemachine_wf.dag import DagBuilder, check
from statemachine_wf.definition.dag_definition import LOOP_HANDLE, Edge
from statemachine_wf.definition.dag_models import Graph
from statemachine_wf.definition.events import Ev, EventRecord, NewEvent, Status

NODES = ("a", "b", "l")
HANDLES = (None, LOOP_HANDLE, "done", "yes")


def record(
    seq: int, kind: str, node: str | None, attempt: int | None, **payload: Any
) -> EventRecord:
    return EventRecord(seq, "i", kind, node, attempt, payload, None, None, time.time())


def created() -> EventRecord:
    return record(1, str(Ev.CREATED), None, None, dag={"name": "x"}, input={"n": 1})


@st.composite
def logs(draw: st.DrawFn) -> list[EventRecord]:
    """Dispatches and completions of three nodes, each node's runs in order (with gaps:
    a run that failed leaves no completion; repeats: a run delivered twice)."""
    events = [created()]
    runs = dict.fromkeys(NODES, 1)
    for _ in range(draw(st.integers(0, 40))):
        node = draw(st.sampled_from(NODES))
        runs[node] += draw(st.sampled_from([0, 0, 1, 1, 2]))
        seq = len(events) + 1
        if draw(st.booleans()):
            via = draw(st.sampled_from(["entry", "back"]))
            events.append(record(seq, str(Ev.NODE_DISPATCHED), node, runs[node], via=via))
        else:
            payload: dict[str, Any] = {
                "handle": draw(st.sampled_from(HANDLES)),
                "output": draw(st.integers(0, 9)),
            }
            if draw(st.booleans()):
                payload["var"] = draw(st.sampled_from(["v", "w"]))
            events.append(record(seq, str(Ev.NODE_COMPLETED), node, runs[node], **payload))
    return events


def scanned(view: LogView, events: list[EventRecord]) -> dict[str, Any]:
    """What the view's questions answer by scanning its lists (and the log itself)."""
    out: dict[str, Any] = {}
    for node in NODES:
        done, sent = view.completions.get(node, []), view.dispatches.get(node, [])
        for run in range(0, 8):
            out[f"completion {node} {run}"] = next((c for c in done if c.run == run), None)
            out[f"dispatch {node} {run}"] = next((d for d in sent if d.run == run), None)
        loops = [c.seq for c in done if c.handle == LOOP_HANDLE]
        out[f"scope_start {node}"] = loops[-1] if loops else 0
        for since in range(0, len(events) + 2):
            out[f"entered {node} {since}"] = any(d.via == "entry" and d.seq > since for d in sent)
            for handle in HANDLES:
                out[f"fired {node} {handle} {since}"] = any(
                    c.seq >= since and c.handle == handle for c in done
                )
    ctx: dict[str, Any] = {"input": view.input}
    for e in sorted(events, key=lambda e: e.seq):
        if e.event_type == str(Ev.NODE_COMPLETED) and e.node is not None:
            ctx[str(e.payload.get("var") or e.node)] = e.payload.get("output")
    out["context"] = ctx
    return out


def asked(view: LogView, events: list[EventRecord]) -> dict[str, Any]:
    """The same questions, asked of the view."""
    out: dict[str, Any] = {}
    for node in NODES:
        for run in range(0, 8):
            out[f"completion {node} {run}"] = view.completion(node, run)
            out[f"dispatch {node} {run}"] = view.dispatch(node, run)
        out[f"scope_start {node}"] = view.scope_start(node)
        for since in range(0, len(events) + 2):
            out[f"entered {node} {since}"] = view.entered.get(node, 0) > since
            for handle in HANDLES:
                edge = Edge(source=node, target="x", source_handle=handle)
                out[f"fired {node} {handle} {since}"] = view.fired(edge, since)
    out["context"] = view.context()
    return out


@given(logs(), st.integers(1, 5))
def test_the_indexes_answer_as_a_scan_of_the_log(events: list[EventRecord], cut: int) -> None:
    whole = LogView.of(events)
    assert asked(whole, events) == scanned(whole, events)
    # Built in pieces, as a runner's cache reads a log's tail after each commit.
    pieces = LogView.of(events[:cut])
    for i in range(cut, len(events), 3):
        pieces.extend(events[i : i + 3])
    assert pieces == whole
    assert asked(pieces, events) == scanned(pieces, events)


@given(logs(), st.sampled_from(NODES), st.sampled_from(HANDLES))
def test_a_copy_with_a_completion_answers_for_it_and_leaves_the_view_as_it_was(
    events: list[EventRecord], node: str, handle: str | None
) -> None:
    view = LogView.of(events)
    before = asked(view, events)
    run = max([c.run for c in view.completions.get(node, [])], default=0) + 1
    copy = view.with_completion(
        NewEvent(Ev.NODE_COMPLETED, node, run, {"handle": handle, "output": 7, "var": "w"})
    )
    folded = [
        *events,
        record(
            len(events) + 1, str(Ev.NODE_COMPLETED), node, run, handle=handle, output=7, var="w"
        ),
    ]
    assert asked(copy, folded) == scanned(copy, folded)
    assert asked(view, events) == before == scanned(view, events)


# -- a loop's decision costs the same at every iteration -----------------------------------


def loop_graph() -> Graph:
    b = DagBuilder("loop")
    b.node("start", "start")
    b.node("each", "loop", items="{{ctx.input.items}}")
    b.node("body", "python", function="f", args={"i": "{{ctx.each.index}}"})
    b.node("end", "end")
    b.edge("start", "each")
    b.edge("each", "body", handle=LOOP_HANDLE)
    b.edge("body", "each")
    b.edge("each", "end", handle="done")
    return check(b.build())


def loop_log(iterations: int) -> list[EventRecord]:
    """``iterations`` rounds of each -> body, and the next round's body dispatched."""
    events = [created()]

    def add(kind: Ev, node: str, run: int, **payload: Any) -> None:
        events.append(record(len(events) + 1, str(kind), node, run, **payload))

    add(Ev.NODE_DISPATCHED, "start", 1, via="entry")
    add(Ev.NODE_COMPLETED, "start", 1, handle=None, output=None)
    for run in range(1, iterations + 2):
        add(Ev.NODE_DISPATCHED, "each", run, via="entry" if run == 1 else "back")
        add(Ev.NODE_COMPLETED, "each", run, handle=LOOP_HANDLE, output={"index": run - 1})
        add(Ev.NODE_DISPATCHED, "body", run, via="entry")
        if run <= iterations:
            add(Ev.NODE_COMPLETED, "body", run, handle=None, output=run)
    return events


def lines(fn: Callable[[], object]) -> int:
    """How many lines of Python ``fn`` runs (a loop's line once each time round, in a
    comprehension too): a count that grows with every item a scan looks at, and no
    timing."""
    n = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal n
        if event == "line":
            n += 1
        return trace

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return n


def test_a_loop_iterations_decision_does_not_grow_with_the_iterations_before_it() -> None:
    graph = loop_graph()
    counted = {}
    for iterations in (20, 400):
        view = LogView.of(loop_log(iterations))
        run = iterations + 1

        def decide(view: LogView = view, run: int = run) -> None:
            decision = it.node_finished(
                graph,
                view,
                "body",
                run,
                NodeOutcome(output=run),
                attempt=1,
                status=Status.RUNNING,
                open_slots=("body",),
            )
            assert decision is not None
            assert [
                (t.node, e.payload.get("via"))
                for t, e in zip(decision.dispatch, decision.events[1:], strict=True)
            ] == [("each", "back")]
            view.context()

        decide()  # once before counting: first calls of anything cached
        counted[iterations] = lines(decide)
    assert counted[20] == counted[400], counted
