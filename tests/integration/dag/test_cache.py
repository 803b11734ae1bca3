"""The executor's per-instance cache: tail reads, a lost CAS, and a DAG-only runner's loop.

On both stores: a snapshot after a seq returns only the log's tail; an executor folds
its own commits into its cache and reads nothing for them, and one whose commit loses
the CAS to another runner re-reads only the tail and still dispatches the join exactly
once; a runner hosting only DAGs never asks for state-machine tasks.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from statemachine_wf import Runner, RunnerOptions, Status, Store
from statemachine_wf.core.dag_interpret import LogView
from statemachine_wf.core.store import DagApplied, DagCommit
from statemachine_wf.dag import DagBuilder, DagClient, Registry
from statemachine_wf.definition.events import Ev, NewEvent
from statemachine_wf.runtime.dag_executor import DagExecutor
from statemachine_wf.runtime.dag_handlers import NodeResult

from . import helpers as h


def test_snapshot_after_a_seq_returns_only_the_tail(store: Store) -> None:
    iid = DagClient(store).start(h.linear(2), {"x": 1})
    whole = store.dag_snapshot(iid)
    assert whole is not None
    assert [e.event_type for e in whole.events] == [Ev.CREATED, Ev.NODE_DISPATCHED]
    last = whole.events[-1].seq
    empty = store.dag_snapshot(iid, after_seq=last)
    assert empty is not None
    assert empty.events == []
    assert empty.instance.version == whole.instance.version
    assert empty.open_slots == whole.open_slots == ("s",)
    store.dag_record(iid, NewEvent(Ev.NODE_COMPLETED, "s", 1, {"output": None}), worker="w")
    tail = store.dag_snapshot(iid, after_seq=last)
    assert tail is not None
    assert [(e.event_type, e.node) for e in tail.events] == [(Ev.NODE_COMPLETED, "s")]
    assert store.dag_snapshot("00000000-0000-0000-0000-000000000000") is None


class _Spy:
    """The real store, with dag_snapshot's ``after_seq`` recorded and a hook before one
    dag_commit (another runner committing in between)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.reads: list[int] = []
        self.before_apply: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def dag_snapshot(self, instance_id: str, *, after_seq: int = 0) -> Any:
        self.reads.append(after_seq)
        return self.store.dag_snapshot(instance_id, after_seq=after_seq)

    def dag_commit(self, commit: DagCommit, **kw: Any) -> DagApplied:
        hook, self.before_apply = self.before_apply, None
        if hook is not None:
            hook()
        return self.store.dag_commit(commit, **kw)


def test_a_lost_cas_rereads_the_tail_and_joins_once(store: Store) -> None:
    client = DagClient(store)
    iid = client.start(h.diamond("all"), {})
    spy = _Spy(store)
    mine = DagExecutor(spy, h.registry, worker="a", loop=asyncio.new_event_loop)
    other = DagExecutor(store, h.registry, worker="b", loop=asyncio.new_event_loop)
    graph = LogView.of(store.events(iid)).graph()

    def finish(ex: DagExecutor, node: str) -> None:
        run = LogView.of(store.events(iid)).run(node)
        assert ex.complete(iid, graph, node, run, NodeResult(node), attempt=1)

    finish(mine, "s")
    finish(mine, "a")
    assert set(store.dag_snapshot(iid).open_slots) == {"l", "r"}  # type: ignore[union-attr]
    # While `mine` commits l's scheduling (join not ready: r is open), the other runner
    # completes r and dispatches the join: `mine` loses the CAS, reads the tail, and sees
    # the join already dispatched.
    spy.before_apply = lambda: finish(other, "r")
    before = len(spy.reads)
    finish(mine, "l")
    # Decided on its cache (current after its own commits of s and a, folded in as they
    # committed: no read), lost the CAS, then read the tail only.
    assert len(spy.reads) - before == 1
    assert set(store.dag_snapshot(iid).open_slots) == {"d"}  # type: ignore[union-attr]
    finish(mine, "d")
    finish(mine, "e")
    assert client.get(iid).status == Status.COMPLETED
    dispatched = Counter(e.node for e in client.history(iid) if e.event_type == Ev.NODE_DISPATCHED)
    assert dispatched == dict.fromkeys("saldre", 1)
    # One whole read for this executor and one tail, after the lost CAS: its five commits
    # needed no read of their own.
    assert spy.reads[0] == 0
    assert len(spy.reads) == 2
    assert spy.reads[1] > 0


def test_a_cache_behind_the_log_runs_and_vouches_branches_without_reading(
    store: Store,
) -> None:
    """Once another runner commits on a fan-out too, a commit its blockers vouch for
    lands at a later version and leaves this runner's cache behind the log. The next
    branches (first tries of runs the cache holds dispatched) run and commit on it with no
    read; the last branch, which nothing vouches for any more, is decided again on a read
    and dispatches the join once."""
    h.shared_at_once(store)  # the other runner takes mine's dispatched branches at once
    client = DagClient(store)
    iid = client.start(h.fan_out(6), {"x": 1})
    spy = _Spy(store)
    loop = asyncio.new_event_loop()
    mine = DagExecutor(spy, h.registry, worker="mine", loop=lambda: loop)
    other = DagExecutor(store, h.registry, worker="other", loop=lambda: loop)

    def claim(worker: str) -> Any:
        [one] = store.dag_claim(worker=worker, types=["swf.dag"], lease=30)
        return one

    def other_runs_a_branch() -> None:
        assert other.run(claim("other")) is None

    def twice() -> None:  # before mine's next commit, and again before the one after
        spy.before_apply = other_runs_a_branch
        other_runs_a_branch()

    try:
        assert mine.run(claim("mine")) is None  # s: the six branches dispatched
        assert spy.reads == [0]
        # Mine's first branch loses its CAS to the other runner's (a read), and its retry,
        # vouched for, commits after a further commit of the other's: mine is behind.
        spy.before_apply = twice
        assert mine.run(claim("mine")) is None
        assert len(spy.reads) == 2
        # Two more branches: run and committed on the cache behind the log, no read.
        assert mine.run(claim("mine")) is None
        assert mine.run(claim("mine")) is None
        assert len(spy.reads) == 2
        # The last: its blockers all settled, the store refuses it, and it is decided
        # again on a read: the join (the end) is dispatched.
        assert mine.run(claim("mine")) is None
        assert len(spy.reads) == 3
        end = claim("mine")
        assert end.task.slot == "e"
        assert mine.run(end) is None
    finally:
        mine.close()
        other.close()
        loop.close()
    assert client.get(iid).status == Status.COMPLETED
    assert client.output(iid) == {f"b{i}": 1 + i for i in range(6)}
    history = client.history(iid)
    started = Counter(e.node for e in history if e.event_type == Ev.NODE_STARTED)
    assert started == dict.fromkeys(["s", "e", *(f"b{i}" for i in range(6))], 1)
    dispatched = Counter(e.node for e in history if e.event_type == Ev.NODE_DISPATCHED)
    assert dispatched == dict.fromkeys(["s", "e", *(f"b{i}" for i in range(6))], 1)


def test_a_dag_only_runner_never_claims_state_machine_tasks(store: Store) -> None:
    calls: list[tuple[str, ...]] = []
    real_claim = store.claim

    def claim(**kw: Any) -> Any:
        calls.append(tuple(kw["types"]))
        return real_claim(**kw)

    store.claim = claim  # type: ignore[method-assign]
    client = DagClient(store)
    iid = client.start(h.linear(3), {"x": 1})
    runner = Runner(store, [], dags=h.registry, options=RunnerOptions(concurrency=2, idle_poll=0.2))
    runner.start()
    try:
        record = client.wait(iid, timeout=30)
    finally:
        runner.stop(timeout=10)
    assert record.status == Status.COMPLETED
    assert record.progress == {"output": {"result": 4}}
    assert calls == []


class _CountingReads:
    """The real store, its dag_snapshot calls counted."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def dag_snapshot(self, instance_id: str, *, after_seq: int = 0) -> Any:
        self.reads += 1
        return self.store.dag_snapshot(instance_id, after_seq=after_seq)


def test_one_runner_reads_an_instance_once_and_folds_in_its_own_commits(store: Store) -> None:
    """With no other runner committing, every decision after the first read is made on the
    cache: the runner's own commits come back with their seqs and are folded in, and a
    node claimed (or taken) at a version the cache has reached runs on it."""
    counting = _CountingReads(store)
    client = DagClient(store)
    ids = [client.start(h.fan_out(8), {"x": 1}), client.start(h.linear(5), {"x": 1})]
    runner = Runner(
        counting,
        [],
        dags=h.registry,
        options=RunnerOptions(concurrency=2, idle_poll=0.2),
    )
    runner.start()
    try:
        records = [client.wait(iid, timeout=30) for iid in ids]
    finally:
        runner.stop(timeout=10)
    assert [r.status for r in records] == [Status.COMPLETED, Status.COMPLETED]
    assert records[0].progress == {"output": {f"b{i}": 1 + i for i in range(8)}}
    assert records[1].progress == {"output": {"result": 6}}
    for iid in ids:  # each node once, and the log as a whole read folds it
        started = Counter(e.node for e in client.history(iid) if e.event_type == Ev.NODE_STARTED)
        assert set(started.values()) == {1}
    assert counting.reads == len(ids)  # one whole read each, for 17 nodes


def test_a_node_tried_elsewhere_since_the_cache_is_read_before_it_runs(store: Store) -> None:
    """A claim bumps no version, so a cache at the claim's version can still miss another
    runner's try of the node, and what an older version wrote on its own beside it (its
    result, in a commit of its own). A claim whose try is not the next one the cache knows
    of reads the log first: the node's result is found and its function is not run again."""
    ran: Counter[str] = Counter()
    registry = Registry()

    @registry.function("count")
    def count(name: str) -> str:
        ran[name] += 1
        return name

    b = DagBuilder("tried_elsewhere")
    b.node("s", "start")
    b.node("n", "python", function="count", args={"name": "n"})
    b.node("e", "end", outputs={"n": "{{ctx.n}}"})
    b.chain("s", "n", "e")
    h.shared_at_once(store)  # another runner may try mine's dispatched node at once
    client = DagClient(store)
    iid = client.start(b.build(), {})
    loop = asyncio.new_event_loop()
    mine = DagExecutor(store, registry, worker="mine", loop=lambda: loop)
    try:
        _tried_elsewhere(store, client, mine, iid, ran)
    finally:
        mine.close()
        loop.close()


def _tried_elsewhere(
    store: Store, client: DagClient, mine: DagExecutor, iid: str, ran: Counter[str]
) -> None:
    [start] = store.dag_claim(worker="mine", types=["swf.dag"], lease=30)
    assert mine.run(start) is None  # s completed, n dispatched; mine's cache is warm
    # Another runner claims n, records its result on its own (as versions before the
    # one-commit completion did) and dies: its lease is handed back.
    [theirs] = store.dag_claim(worker="old", types=["swf.dag"], lease=30)
    assert (theirs.task.slot, theirs.task.attempt) == ("n", 1)
    done = NewEvent(Ev.NODE_COMPLETED, "n", 1, {"output": "n", "handle": None, "try": 1})
    assert store.dag_record(iid, done, worker="old")
    store.release(worker="old", instance_ids=[iid])
    [again] = store.dag_claim(worker="mine", types=["swf.dag"], lease=30)
    assert (again.task.slot, again.task.attempt) == ("n", 2)
    assert again.instance.version == start.instance.version + 1  # no bump since mine's commit
    mine.run(again)  # schedules the recorded result: the end is dispatched
    assert ran == {}
    [end] = store.dag_claim(worker="mine", types=["swf.dag"], lease=30)
    mine.run(end)
    assert client.get(iid).status == Status.COMPLETED
    assert client.output(iid) == {"n": "n"}


def test_the_instances_of_one_definition_share_one_parsed_graph(
    store: Store, monkeypatch: Any
) -> None:
    from statemachine_wf.core import dag_view
    from statemachine_wf.runtime import dag_cache

    parses: list[str] = []
    real_check = dag_view.check  # type: ignore[attr-defined]  # its import, patched below

    def counting(definition: Any) -> Any:
        parses.append(definition.name)
        return real_check(definition)

    monkeypatch.setattr(dag_view, "check", counting)  # what LogView.graph parses with
    client = DagClient(store)
    # Two instances of one definition (their inputs differ), and two definitions of one
    # name and shape whose join differs: the definition's content decides.
    a1 = client.start(h.linear(3), {"x": 1})
    a2 = client.start(h.linear(3), {"x": 2})
    b = client.start(h.diamond("all"), {})
    c = client.start(h.diamond("any"), {})
    cache = dag_cache.DagCache(store)

    def graph(iid: str) -> Any:
        entry = cache.entry(iid)
        assert cache.read(entry, iid) is not None
        return entry.graph

    g1, g2, gb, gc = graph(a1), graph(a2), graph(b), graph(c)
    assert g1 is g2
    assert gb is not g1
    assert gc is not gb
    assert g1.start == "s"
    assert set(gc.nodes) == set(gb.nodes)
    assert len(parses) == 3
    # A new entry for an instance already parsed (evicted, say) parses nothing.
    cache.forget(a1)
    assert graph(a1) is g1
    assert len(parses) == 3


def test_threads_reading_one_definition_together_parse_it_once(
    store: Store, monkeypatch: Any
) -> None:
    """A runner's workers first read a definition's instances together: the first parses
    the graph and the others wait for it (each parsed it before, three times a process in
    a four-process fan-out run: bench/README.md, "Session 50")."""
    import threading
    import time

    from statemachine_wf.core import dag_view
    from statemachine_wf.runtime import dag_cache

    parses: list[str] = []
    real_check = dag_view.check  # type: ignore[attr-defined]  # its import, patched below

    def slow(definition: Any) -> Any:
        parses.append(definition.name)
        time.sleep(0.2)  # the others arrive while this one parses
        return real_check(definition)

    monkeypatch.setattr(dag_view, "check", slow)
    client = DagClient(store)
    ids = [client.start(h.linear(3), {"x": n}) for n in range(4)]
    cache = dag_cache.DagCache(store)
    start = threading.Barrier(len(ids))
    graphs: dict[str, Any] = {}

    def read(iid: str) -> None:
        entry = cache.entry(iid)
        start.wait(timeout=10)
        assert cache.read(entry, iid) is not None
        graphs[iid] = entry.graph

    threads = [threading.Thread(target=read, args=(iid,)) for iid in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(parses) == 1
    assert len(graphs) == len(ids)
    assert len({id(g) for g in graphs.values()}) == 1
    assert cache._parsing == {}


def test_a_parse_that_fails_is_tried_again_by_the_next_reader(
    store: Store, monkeypatch: Any
) -> None:
    from statemachine_wf.core import dag_view
    from statemachine_wf.runtime import dag_cache

    real_check = dag_view.check  # type: ignore[attr-defined]  # its import, patched below
    calls: list[str] = []

    def failing_once(definition: Any) -> Any:
        calls.append(definition.name)
        if len(calls) == 1:
            raise RuntimeError("parse failed")
        return real_check(definition)

    monkeypatch.setattr(dag_view, "check", failing_once)
    iid = DagClient(store).start(h.linear(2), {})
    cache = dag_cache.DagCache(store)
    entry = cache.entry(iid)
    with pytest.raises(RuntimeError, match="parse failed"):
        cache.read(entry, iid)
    assert cache._parsing == {}  # nobody left waiting on it
    cache.forget(iid)
    entry = cache.entry(iid)
    assert cache.read(entry, iid) is not None
    assert entry.graph is not None
    assert len(calls) == 2


def test_the_parsed_graphs_are_bounded(store: Store, monkeypatch: Any) -> None:
    from statemachine_wf.runtime import dag_cache

    monkeypatch.setattr(dag_cache, "CACHED_GRAPHS", 2)
    client = DagClient(store)
    ids = [client.start(h.linear(n), {}) for n in (2, 3, 4)]
    cache = dag_cache.DagCache(store)
    graphs = []
    for iid in ids:
        entry = cache.entry(iid)
        cache.read(entry, iid)
        graphs.append(entry.graph)
    assert len(cache._graphs) == 2  # the first definition's went
    assert list(cache._graphs.values()) == graphs[1:]
    # Read again, the first is parsed anew (an equal graph, not the same object).
    cache.forget(ids[0])
    entry = cache.entry(ids[0])
    cache.read(entry, ids[0])
    assert entry.graph is not graphs[0]
    assert entry.graph is not None
    assert graphs[0] is not None
    assert set(entry.graph.nodes) == set(graphs[0].nodes)
