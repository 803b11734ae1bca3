"""Hypothesis: random valid DAGs under random worker interleavings run every node once.

Join modes (the end's included) are random: an ``any`` join may let the end run while
other branches are still open; the instance then drains them before it completes.

The interpreter is pure, so a tiny in-memory store with the real rules (a version CAS,
the once-per-run unique index, node tasks by slot) is enough to explore interleavings a
database would make rare: a worker reads its snapshot, others commit, then it tries its
CAS; results are delivered twice. Random definitions that break a rule are rejected
with a reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statemachine_wf.core import dag_interpret as it
from statemachine_wf.core.dag_interpret import DagDecision, LogView
from statemachine_wf.dag import DagDefinition, check, load
from statemachine_wf.definition.events import ONCE_PER_ATTEMPT, Ev, EventRecord, NewEvent, Status
from statemachine_wf.errors import ConcurrencyConflict, DefinitionError

ONCE = {*map(str, ONCE_PER_ATTEMPT), "NODE_COMPLETED", "NODE_DISPATCHED", "NODE_FAILED"}


@dataclass
class MemoryStore:
    """The rules of the real stores that the interpreter relies on, in memory."""

    log: list[EventRecord] = field(default_factory=list)
    version: int = 0
    slots: set[str] = field(default_factory=set)
    status: Status = Status.RUNNING

    def append(self, events: tuple[NewEvent, ...] | list[NewEvent]) -> None:
        keys = {(e.node, e.event_type, e.attempt) for e in self.log if e.event_type in ONCE}
        for e in events:
            key = (e.node, str(e.event_type), e.attempt)
            if str(e.event_type) in ONCE and e.node is not None and key in keys:
                raise ConcurrencyConflict("i", -1)
        for e in events:
            self.log.append(
                EventRecord(
                    len(self.log) + 1,
                    "i",
                    str(e.event_type),
                    e.node,
                    e.attempt,
                    dict(e.payload),
                    e.error,
                    None,
                    time.time(),
                )
            )

    def record(self, event: NewEvent) -> bool:
        if self.status.terminal:
            return False
        try:
            self.append([event])
        except ConcurrencyConflict:
            return False
        return True

    def apply(self, version: int, d: DagDecision) -> None:
        if version != self.version:
            raise ConcurrencyConflict("i", version, self.version)
        self.append(d.events)
        self.version += 1
        if d.status is not None:
            self.status = d.status
        if d.finish:
            self.slots.clear()
        elif d.done is not None:
            self.slots.discard(d.done)
        for t in d.dispatch:
            assert t.node not in self.slots, f"{t.node} dispatched while its task exists"
            self.slots.add(t.node)


@st.composite
def random_dags(draw: st.DrawFn) -> DagDefinition:
    """Layered graphs: every node reachable from the start and reaching the end."""
    layers = draw(st.lists(st.integers(1, 4), min_size=1, max_size=5))
    nodes: list[dict[str, Any]] = [{"id": "s", "type": "start"}]
    edges: list[dict[str, Any]] = []
    prev = ["s"]
    ids: list[str] = []
    for li, width in enumerate(layers):
        layer = [f"n{li}_{k}" for k in range(width)]
        for nid in layer:
            join = draw(st.sampled_from(["all", "any"]))
            nodes.append({"id": nid, "type": "python", "join": join, "config": {"function": "f"}})
            parents = draw(st.lists(st.sampled_from(prev), min_size=1, unique=True))
            edges += [{"source": p, "target": nid} for p in parents]
        # every node of the previous layer feeds someone
        for p in prev:
            if not any(e["source"] == p for e in edges):
                edges.append({"source": p, "target": draw(st.sampled_from(layer))})
        ids += layer
        prev = layer
    nodes.append({"id": "e", "type": "end", "join": draw(st.sampled_from(["all", "any"]))})
    sinks = [n for n in ids if not any(e["source"] == n for e in edges)]
    edges += [{"source": n, "target": "e"} for n in sinks]
    return load({"name": "random", "nodes": nodes, "edges": edges})


@dataclass
class Worker:
    node: str
    run: int
    phase: str = "record"
    snapshot: tuple[int, list[EventRecord], tuple[str, ...], Status] | None = None
    duplicate: bool = False
    runner: int = 0


@given(random_dags(), st.data())
def test_every_node_runs_exactly_once_under_any_interleaving(
    definition: DagDefinition, data: st.DataObject
) -> None:
    graph = check(definition)
    mem = MemoryStore()
    created = {"input": {}, "dag": definition.dump()}
    mem.append(it.start_events(graph, created))
    mem.slots.add(graph.start)
    claimed: set[str] = set()
    workers: list[Worker] = []
    executions: dict[str, int] = {}
    # Like DagExecutor: each of two runners keeps one view per instance and folds in only
    # the log's tail at each read; a decision uses that view as it is at commit time (it
    # may hold more than the snapshot's version, never less).
    cached = data.draw(st.booleans(), label="cached views")
    views: list[LogView | None] = [None, None]
    for _ in range(10_000):
        free = sorted(mem.slots - claimed)
        choices = len(workers) + len(free)
        if choices == 0:
            break
        pick = data.draw(st.integers(0, choices - 1))
        if pick >= len(workers):  # claim a task
            node = free[pick - len(workers)]
            claimed.add(node)
            run = LogView.of(mem.log).run(node)
            executions[node] = executions.get(node, 0) + 1
            dup = data.draw(st.booleans())
            workers.append(Worker(node, run, runner=data.draw(st.integers(0, 1))))
            if dup:  # the same result delivered twice
                workers.append(
                    Worker(node, run, duplicate=True, runner=data.draw(st.integers(0, 1)))
                )
            continue
        w = workers[pick]
        if w.phase == "record":
            handle_payload = {"output": w.node, "handle": None, "var": w.node, "try": 1}
            ok = mem.record(NewEvent(Ev.NODE_COMPLETED, w.node, w.run, handle_payload))
            if not ok:
                workers.pop(pick)  # duplicate or ended: a no-op before any scheduling
                continue
            w.phase = "read"
        elif w.phase == "read":
            w.snapshot = (mem.version, list(mem.log), tuple(sorted(mem.slots)), mem.status)
            cache = views[w.runner]
            if cache is None:
                views[w.runner] = LogView.of(mem.log)
            else:
                cache.extend(e for e in mem.log if e.seq > cache.last_seq)
            w.phase = "commit"
        else:
            assert w.snapshot is not None
            version, log, slots, status = w.snapshot
            view = views[w.runner] if cached else LogView.of(log)
            assert view is not None
            decision = it.completed(graph, view, w.node, w.run, status=status, open_slots=slots)
            if decision is None:
                workers.pop(pick)
                continue
            try:
                mem.apply(version, decision)
            except ConcurrencyConflict:
                w.phase = "read"  # the loser re-reads and sees the winner's dispatch
                continue
            workers.pop(pick)
            claimed.discard(w.node)
    assert mem.status == Status.COMPLETED, [(e.event_type, e.node) for e in mem.log]
    assert executions == dict.fromkeys(graph.nodes, 1)
    view = LogView.of(mem.log)
    assert {n: len(d) for n, d in view.dispatches.items()} == dict.fromkeys(graph.nodes, 1)
    # Drained: the instance completed only after every node did, with the end's output.
    final = mem.log[-1]
    assert final.event_type == Ev.COMPLETED
    assert all(e.seq < final.seq for e in mem.log if e.event_type == Ev.NODE_COMPLETED)
    assert final.payload == {"node": "e", "output": {"value": "e"}}


@st.composite
def broken_dags(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A valid chain with one rule broken; returns it and a word of the expected reason."""
    nodes: list[dict[str, Any]] = [
        {"id": "s", "type": "start"},
        {"id": "a", "type": "python", "config": {"function": "f"}},
        {"id": "b", "type": "python", "config": {"function": "f"}},
        {"id": "e", "type": "end"},
    ]
    edges: list[dict[str, Any]] = [
        {"source": "s", "target": "a"},
        {"source": "a", "target": "b"},
        {"source": "b", "target": "e"},
    ]
    fault = draw(
        st.sampled_from(
            ["type", "dangling", "no_start", "no_end", "handle", "cycle", "config", "orphan"]
        )
    )
    if fault == "type":
        nodes[1]["type"] = draw(st.sampled_from(["javascript", "eval", "shell"]))
        reason = "unknown type"
    elif fault == "dangling":
        edges.append({"source": "a", "target": draw(st.sampled_from(["x", "zz", "ghost"]))})
        reason = "unknown node"
    elif fault == "no_start":
        nodes.pop(0)
        edges.pop(0)
        reason = "no start node"
    elif fault == "no_end":
        nodes.pop()
        edges.pop()
        reason = "no end node"
    elif fault == "handle":
        edges[1]["sourceHandle"] = draw(st.sampled_from(["error", "loop", "yes"]))
        reason = "cannot produce handle"
    elif fault == "cycle":
        edges.append({"source": "b", "target": "a"})
        reason = "cycle not made by a loop node"
    elif fault == "config":
        del nodes[2]["config"]["function"]
        reason = "config.function"
    else:
        nodes.append({"id": "orphan", "type": "python", "config": {"function": "f"}})
        reason = "cannot reach"
    return {"name": "broken", "nodes": nodes, "edges": edges}, reason


@given(broken_dags())
def test_random_invalid_definitions_are_rejected_with_a_reason(
    case: tuple[dict[str, Any], str],
) -> None:
    data, reason = case
    with pytest.raises(DefinitionError) as info:
        load(data)
    assert any(reason in p for p in info.value.problems), info.value.problems


@given(random_dags(), st.data())
def test_a_view_extended_piece_by_piece_equals_one_read_whole(
    definition: DagDefinition, data: st.DataObject
) -> None:
    graph = check(definition)
    mem = MemoryStore()
    mem.append(it.start_events(graph, {"input": {"k": 1}, "dag": definition.dump()}))
    for node in graph.nodes:
        mem.append([NewEvent(Ev.NODE_STARTED, node, 1, {})])
        mem.append([NewEvent(Ev.NODE_COMPLETED, node, 1, {"output": node, "var": node})])
        mem.append([NewEvent(Ev.NODE_DISPATCHED, node, 2, {"via": "back"})])
    cuts = sorted(data.draw(st.lists(st.integers(1, len(mem.log)), max_size=6)))
    view = LogView.of(mem.log[: cuts[0] if cuts else len(mem.log)])
    for cut in [*cuts[1:], len(mem.log)]:
        view.extend(mem.log[:cut])  # overlapping reads: the folded prefix is skipped
    whole = LogView.of(mem.log)
    assert view == whole
    assert view.last_seq == mem.log[-1].seq
    assert view.context() == whole.context()


@given(random_dags(), st.data())
def test_a_view_folding_its_own_commits_equals_one_read_whole(
    definition: DagDefinition, data: st.DataObject
) -> None:
    """A runner folds its own commits into its view at the seqs they took
    (``LogView.committed``) and reads only when another runner committed (its CAS lost);
    claims' NODE_STARTED, which change no version, reach it only with a later read. At
    any read, and at the end, the view is the one a whole read makes."""
    graph = check(definition)
    mem = MemoryStore()
    mem.append(it.start_events(graph, {"input": {"k": 1}, "dag": definition.dump()}))
    view = LogView.of(mem.log)
    stale = False  # another runner committed since this view's last read
    for node in graph.nodes:
        mem.append([NewEvent(Ev.NODE_STARTED, node, 1, {})])  # a claim, by anybody
        for commit in (
            [NewEvent(Ev.NODE_COMPLETED, node, 1, {"output": node, "var": node})],
            [NewEvent(Ev.NODE_DISPATCHED, node, 2, {"via": "back"})],
        ):
            if data.draw(st.booleans()):  # another runner's commit
                mem.append(commit)
                stale = True
                continue
            if stale:  # the CAS lost: read the tail, then commit again
                view.extend(e for e in mem.log if e.seq > view.last_seq)
                assert view == LogView.of(mem.log)
                stale = False
            mem.append(commit)
            view.committed(commit, [e.seq for e in mem.log[-len(commit) :]])
        if data.draw(st.booleans()):
            view.extend(e for e in mem.log if e.seq > view.last_seq)
            assert view == LogView.of(mem.log)
    view.extend(e for e in mem.log if e.seq > view.last_seq)
    assert view == LogView.of(mem.log)
    assert view.own == set()
    assert view.top_seq == view.last_seq == mem.log[-1].seq


def test_open_after_drops_the_settled_task_and_adds_the_dispatched() -> None:
    decision = DagDecision(done="a", dispatch=(it.NodeTask("c"), it.NodeTask("b")))
    assert it.open_after(("a", "b"), decision) == ("b", "c")
    assert it.open_after(("a", "b"), DagDecision(done="a", finish=True)) == ()
    retry = DagDecision(retry=it.TaskRetry("a", 1.0, 1))
    assert it.open_after(("a",), retry) == ("a",)
