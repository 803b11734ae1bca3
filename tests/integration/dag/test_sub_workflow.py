"""Sub-workflow nodes: a state machine run as one DAG node, on both stores.

The node starts its child once per node run (an idempotency key from the DAG instance,
the node and the run), parks its task while the child runs (no thread, no lease, no
poll), and is woken by the child's finishing commit.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from statemachine_wf import Client, Status, Store
from statemachine_wf.core.dag_interpret import LogView
from statemachine_wf.dag import DagClient
from statemachine_wf.definition.events import Ev
from statemachine_wf.runtime.dag_executor import DagExecutor
from statemachine_wf.runtime.dag_handlers import ChildRunning, NodeCall, handler_for
from statemachine_wf.stores import open_store

from . import helpers as h


def _wait_for(what: str, check: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout} s")
        time.sleep(0.02)


def test_child_failure_follows_the_error_handle_with_continue(store: Store) -> None:
    client = DagClient(store)
    with h.running(store):
        iid = client.start(h.sub_workflow("continue"), h.child_input(2, fail=True))
        record = client.wait(iid, timeout=30)
    assert record.status == Status.COMPLETED
    out = client.output(iid)
    assert out is not None
    error = out["child"]["error"]
    assert error["code"] == "sub_workflow_failed"
    assert "the child says no" in error["message"]
    assert client.context(iid)["handle"] == "sub_workflow_failed"
    [child] = store.children(iid)
    assert child.status == Status.FAILED
    assert child.parent_node == "sub"
    assert child.id in error["message"]


def test_child_failure_fails_the_workflow(store: Store) -> None:
    client = DagClient(store)
    with h.running(store):
        iid = client.start(h.sub_workflow(), h.child_input(2, fail=True))
        record = client.wait(iid, timeout=30)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error["node"] == "sub"
    assert record.error["code"] == "sub_workflow_failed"
    [child] = store.children(iid)
    assert child.status == Status.FAILED
    # The child's failure is final for this node run: no retry starts another child.
    types = Counter(e.event_type for e in client.history(iid) if e.node == "sub")
    assert types[Ev.NODE_RETRYING] == 0
    assert types[Ev.NODE_FAILED] == 1
    assert store.task(iid, "sub") is None


def test_a_waiting_node_holds_no_thread_and_no_lease(store: Store) -> None:
    """One worker thread only: the child can run at all only if the parent's node
    gave its thread back, and while the child runs the node's task is parked."""
    client = DagClient(store)
    with h.running(store, concurrency=1):
        iid = client.start(h.sub_workflow(), h.child_input(5, pause=1.0))
        _wait_for(
            "waiting node",
            lambda: any(e.event_type == Ev.NODE_WAITING for e in client.history(iid)),
        )
        [child] = store.children(iid)
        task = store.task(iid, "sub")
        assert task is not None
        assert not task.leased
        assert task.due_at > time.time() + 60  # only the safety net; the child wakes it
        assert store.get(child.id).status in (Status.PENDING, Status.RUNNING)  # type: ignore[union-attr]
        record = client.wait(iid, timeout=30)
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"child": {"doubled": 10, "seen": 5}}
    hist = client.history(iid)
    child_done = store.get(child.id)
    assert child_done is not None
    woke = [e for e in hist if e.event_type == Ev.NODE_STARTED and e.node == "sub"][-1]
    # Woken by the child's end, not by the safety net 300 s later.
    assert woke.created_at < child_done.updated_at + 60


def test_a_node_run_starts_one_child_however_often_it_runs(store: Store) -> None:
    client = DagClient(store)
    iid = client.start(h.sub_workflow(), h.child_input(4))
    loop = asyncio.new_event_loop()
    executor = DagExecutor(store, h.registry, worker="w", loop=lambda: loop)
    [start] = store.dag_claim(worker="w", types=["swf.dag"], lease=30)
    executor.run(start)
    [first] = store.dag_claim(worker="w", types=["swf.dag"], lease=30)
    assert first.task.slot == "sub"
    executor.run(first)  # starts the child and parks
    [child] = store.children(iid)
    # The same node run delivered again (a retried or duplicated task): same child.
    store.wake_parent(child.id)
    [again] = store.dag_claim(worker="w", types=["swf.dag"], lease=30)
    assert again.task.slot == "sub"
    executor.run(again)
    view = LogView.of(store.events(iid))
    graph = view.graph()
    call = NodeCall(
        instance_id=iid,
        node=graph.nodes["sub"],
        config=graph.config("sub"),
        ctx=view.context(),
        run=1,
        attempt=9,
        registry=h.registry,
        pool=executor._pool,
        store=store,
    )
    for _ in range(3):
        with pytest.raises(ChildRunning) as info:
            loop.run_until_complete(handler_for("sub_workflow")(call))
        assert info.value.child_id == child.id
    loop.close()
    executor.close()
    assert [c.id for c in store.children(iid)] == [child.id]
    waits = [e.payload["child"] for e in store.events(iid) if e.event_type == Ev.NODE_WAITING]
    assert waits == [child.id, child.id]
    # Now let the child run: the DAG completes with one child and one completion of sub.
    with h.running(store):
        record = client.wait(iid, timeout=30)
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"child": {"doubled": 8, "seen": 4}}
    assert client.executions(iid)["sub"] == 1
    assert len(store.children(iid)) == 1


def test_bad_child_input_is_a_clear_node_error(store: Store) -> None:
    client = DagClient(store)
    with h.running(store):
        iid = client.start(h.sub_workflow(), h.child_input("not a number"))  # type: ignore[arg-type]
        record = client.wait(iid, timeout=30)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error["node"] == "sub"
    assert record.error["code"] == "ValidationError"
    assert "valid integer" in record.error["message"]
    assert store.children(iid) == []  # nothing was started


@pytest.mark.slow
@pytest.mark.crash
def test_sigkill_the_runner_of_a_running_child(
    store_url: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    """Two runner processes; the one running a child's step is SIGKILLed mid-step. The
    other takes the child over when its lease runs out, the child's end wakes the parent
    node, and every DAG completes with one child and one completion per node."""
    url, options = store_url
    schema = options.get("schema", "-")
    store = open_store(url, **options)
    store.migrate()
    marks = tmp_path / "marks.txt"
    client = DagClient(store)
    try:
        with h.runner_processes(url, schema, marks, count=2, lease=2.0) as procs:
            ids = [
                client.start(h.sub_workflow(), h.child_input(i, pause=4.0, run=f"r{i}"))
                for i in range(3)
            ]
            _wait_for(
                "child step",
                lambda: marks.exists() and "child:work" in marks.read_text(),
                timeout=30,
            )
            # The child whose work step began first, just now (its mark is the first): the
            # kill lands inside its 4 s. (Taking the first RUNNING child instead once
            # picked one whose step had begun earlier and ended before the kill.)
            first = next(m for m in marks.read_text().splitlines() if m.endswith(" child:work"))
            run = first.split()[0]
            child = next(c for i in ids for c in store.children(i) if c.input["run"] == run)
            started = [e for e in store.events(child.id) if e.event_type == Ev.STEP_STARTED]
            assert started[-1].node == "work"
            victim = next(p for p in procs if f":{p.pid}:" in str(started[-1].worker))
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            for iid in ids:
                assert client.wait(iid, timeout=90).status == Status.COMPLETED
        for n, iid in enumerate(ids):
            assert client.output(iid) == {"child": {"doubled": 2 * n, "seen": n}}
            [kid] = store.children(iid)
            assert kid.status == Status.COMPLETED
            hist = client.history(iid)
            assert set(
                Counter(e.node for e in hist if e.event_type == Ev.NODE_COMPLETED).values()
            ) == {1}
            assert set(
                Counter(e.node for e in hist if e.event_type == Ev.NODE_DISPATCHED).values()
            ) == {1}
        # The killed step really ran again elsewhere: at least once, never lost.
        lines = Counter(marks.read_text().split("\n")[:-1])
        assert all(lines[f"r{n} child:echo"] >= 1 for n in range(3))
        assert lines[f"{child.input['run']} child:work"] >= 2
        assert Client(store).verify(child.id) == {}
    finally:
        store.close()


def _drive_to_parked(store: Store, iid: str, executor: DagExecutor) -> str:
    """Run the start and the sub_workflow node by hand until the node parks; its child id."""
    [start] = store.dag_claim(worker="w", types=["swf.dag"], lease=30)
    executor.run(start)
    [sub] = store.dag_claim(worker="w", types=["swf.dag"], lease=30)
    executor.run(sub)
    [child] = store.children(iid)
    return child.id


def test_a_finishing_child_wakes_its_parked_node_in_the_same_commit(store: Store) -> None:
    client = DagClient(store)
    loop = asyncio.new_event_loop()
    executor = DagExecutor(store, h.registry, worker="w", loop=lambda: loop)
    try:
        iid = client.start(h.sub_workflow(), h.child_input(1))
        child = _drive_to_parked(store, iid, executor)
        parked = store.task(iid, "sub")
        assert parked is not None
        assert parked.due_at > time.time() + 60
        Client(store).cancel(child)  # nobody runs it: it ends at once (Finish)
        woken = store.task(iid, "sub")
        assert woken is not None
        assert woken.due_at <= time.time()
        assert not woken.leased
        [again] = store.dag_claim(worker="w", types=["swf.dag"], lease=30)
        executor.run(again)  # finds the child cancelled: the node fails, so does the DAG
        assert client.get(iid).status == Status.FAILED
        assert client.get(iid).error["code"] == "sub_workflow_cancelled"  # type: ignore[index]

        # A node task a runner holds is left alone (that runner re-reads the child).
        other = client.start(h.sub_workflow(), h.child_input(2))
        kid = _drive_to_parked(store, other, executor)
        store.wake_parent(kid)
        [held] = store.dag_claim(worker="w", types=["swf.dag"], lease=30)
        assert held.task.slot == "sub"
        Client(store).cancel(kid)
        still = store.task(other, "sub")
        assert still is not None
        assert still.leased
        assert still.due_at > time.time() + 20
        executor.run(held)
        assert client.get(other).status == Status.FAILED
    finally:
        executor.close()
        loop.close()


class _CancelParentOnCreate:
    """The real store, except that starting a child first cancels the parent DAG: the
    cancel's look for children runs before the child exists."""

    def __init__(self, store: Store, parent: str) -> None:
        self._store = store
        self._parent = parent

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    def create(self, new: object) -> tuple[str, bool]:
        DagClient(self._store).cancel(self._parent)
        return self._store.create(new)  # type: ignore[arg-type]


def test_a_child_started_while_its_parent_is_cancelled_is_cancelled(store: Store) -> None:
    client = DagClient(store)
    iid = client.start(h.sub_workflow(), h.child_input(1))
    loop = asyncio.new_event_loop()
    executor = DagExecutor(store, h.registry, worker="w", loop=lambda: loop)
    racing = DagExecutor(
        _CancelParentOnCreate(store, iid),  # type: ignore[arg-type]
        h.registry,
        worker="w",
        loop=lambda: loop,
    )
    try:
        [start] = store.dag_claim(worker="w", types=["swf.dag"], lease=30)
        executor.run(start)
        [sub] = store.dag_claim(worker="w", types=["swf.dag"], lease=30)
        racing.run(sub)
    finally:
        executor.close()
        racing.close()
        loop.close()
    assert client.get(iid).status == Status.CANCELLED
    [child] = store.children(iid)
    assert child.status == Status.CANCELLED
    assert not [e for e in store.events(iid) if e.event_type == Ev.NODE_WAITING]
