"""Many instances across four runner processes on PostgreSQL: every join exactly once.

Also: a result delivered twice (the at-least-once case) writes nothing the second time
and dispatches nothing twice, on both stores.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from statemachine_wf import Status, Store
from statemachine_wf.core.dag_interpret import LogView
from statemachine_wf.dag import DagBuilder, DagClient, DagDefinition
from statemachine_wf.definition.events import Ev, NewEvent
from statemachine_wf.runtime.dag_executor import DagExecutor
from statemachine_wf.runtime.dag_handlers import NodeResult
from statemachine_wf.stores.postgres import PostgresStore

from . import helpers as h

ROOT = Path(__file__).resolve().parents[3]


def marked_diamond() -> DagDefinition:
    b = DagBuilder("diamond_and_marked")
    b.node("s", "start")
    for name in ("a", "l", "r", "join"):
        b.node(name, "python", function="mark", args={"run": "{{ctx.input.run}}", "name": name})
    b.node("e", "end", outputs={"joined": "{{ctx.join}}"})
    b.chain("s", "a", "l", "join", "e")
    b.chain("a", "r", "join")
    return b.build()


def marked_linear(n: int = 4) -> DagDefinition:
    b = DagBuilder("linear_marked")
    b.node("s", "start")
    names = [f"n{i}" for i in range(n)]
    for name in names:
        b.node(name, "python", function="mark", args={"run": "{{ctx.input.run}}", "name": name})
    b.node("e", "end", outputs={"last": f"{{{{ctx.{names[-1]}}}}}"})
    b.chain("s", *names, "e")
    return b.build()


def marked_fan_out(width: int = 30) -> DagDefinition:
    """s -> b0..b{width-1} -> join -> e, every node marking its run."""
    b = DagBuilder("fan_out_marked")
    b.node("s", "start")
    names = [f"b{i}" for i in range(width)]
    for name in [*names, "join"]:
        b.node(name, "python", function="mark", args={"run": "{{ctx.input.run}}", "name": name})
    b.node("e", "end", outputs={"joined": "{{ctx.join}}"})
    for name in names:
        b.chain("s", name, "join")
    b.edge("join", "e")
    return b.build()


@pytest.fixture
def runners(pg_dsn: str, pg_schema: str, tmp_path: Path) -> Iterator[tuple[PostgresStore, Path]]:
    with _runners(pg_dsn, pg_schema, tmp_path, lease=30.0) as (store, marks, _):
        yield store, marks


@contextmanager
def _runners(
    pg_dsn: str, pg_schema: str, tmp_path: Path, *, lease: float
) -> Iterator[tuple[PostgresStore, Path, list[subprocess.Popen[bytes]]]]:
    store = PostgresStore(pg_dsn, schema=pg_schema)
    store.migrate()
    marks = tmp_path / "marks.txt"
    try:
        with h.runner_processes(pg_dsn, pg_schema, marks, count=4, lease=lease) as procs:
            yield store, marks, procs
    finally:
        store.close()


def _wait_all(client: DagClient, ids: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for iid in ids:
        client.wait(iid, timeout=max(0.1, deadline - time.monotonic()))


def _per_node(store: PostgresStore, event_type: str) -> Counter[tuple[str, str]]:
    with store._conn() as conn:  # the raw rows, not the client's view of them
        rows = conn.execute(
            "SELECT instance_id::text AS i, node, count(*) AS n FROM wf_events"
            " WHERE event_type = %s GROUP BY instance_id, node",
            (event_type,),
        ).fetchall()
    return Counter({(r["i"], r["node"]): int(r["n"]) for r in rows})


def _each_node_once(
    store: PostgresStore, marks: Path, ids: list[str], *, marked: int, nodes: int
) -> set[str | None]:
    """Every instance COMPLETED with the join's output, each of its ``marked`` nodes run
    once and each of its ``nodes`` dispatched and completed once; the workers that ran."""
    client = DagClient(store)
    _wait_all(client, ids, timeout=120)
    assert {client.get(i).status for i in ids} == {Status.COMPLETED}
    assert all(client.output(i) == {"joined": "join"} for i in ids)
    executions = Counter(marks.read_text().split("\n")[:-1])
    assert len(executions) == len(ids) * marked
    assert set(executions.values()) == {1}, executions.most_common(3)
    for event_type in ("NODE_DISPATCHED", "NODE_COMPLETED"):
        counts = _per_node(store, event_type)
        assert len(counts) == len(ids) * nodes
        assert set(counts.values()) == {1}
    return {e.worker for i in ids for e in client.history(i) if e.event_type == Ev.NODE_STARTED}


@pytest.mark.postgres
@pytest.mark.slow
def test_50_diamond_and_across_4_processes_join_once(
    runners: tuple[PostgresStore, Path],
) -> None:
    store, marks = runners
    client = DagClient(store)
    ids = [client.start(marked_diamond(), {"run": f"d{i}"}) for i in range(50)]
    workers = _each_node_once(store, marks, ids, marked=4, nodes=6)
    assert len(workers) == 4  # the work really was spread over the processes


@pytest.mark.postgres
@pytest.mark.slow
def test_fan_outs_across_4_processes_run_each_branch_once_and_join_once(
    runners: tuple[PostgresStore, Path],
) -> None:
    # Four processes on the branches of the same few instances: once a runner has seen
    # another commit on an instance, its branches' completions commit on their blockers'
    # word (an open input of the join) instead of losing the CAS to each other; the
    # branch that finds the others done dispatches the join, once.
    store, marks = runners
    client = DagClient(store)
    ids = [client.start(marked_fan_out(30), {"run": f"f{i}"}) for i in range(6)]
    workers = _each_node_once(store, marks, ids, marked=31, nodes=33)
    assert len(workers) > 1


@pytest.mark.postgres
@pytest.mark.slow
def test_100_linear_across_4_processes(runners: tuple[PostgresStore, Path]) -> None:
    store, marks = runners
    client = DagClient(store)
    definition = marked_linear(4)
    ids = [client.start(definition, {"run": f"l{i}"}) for i in range(100)]
    _wait_all(client, ids, timeout=120)
    assert {client.get(i).status for i in ids} == {Status.COMPLETED}
    executions = Counter(marks.read_text().split("\n")[:-1])
    assert len(executions) == 100 * 4
    assert set(executions.values()) == {1}
    assert set(_per_node(store, "NODE_DISPATCHED").values()) == {1}


def _holds_a_node(dsn: str, schema: str, pid: int, slow: list[str]) -> bool:
    """Whether ``pid``'s runner started one of the ``slow`` nodes in the last 0.1 s and has
    not completed it: the node's 0.2 s pause has 0.1 s left at least, time enough for the
    SIGKILL to land in it. (A live lease was not enough: a node claimed 0.2 s before could
    complete, and hand over nothing, between this read and the kill; nor was any node: the
    start node, which does not pause, was once read between its start and its
    completion.)"""
    import psycopg

    with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}") as conn:
        row = conn.execute(
            "SELECT count(*) FROM wf_events s WHERE s.event_type = 'NODE_STARTED'"
            " AND s.worker LIKE %s AND s.created_at > now() - interval '0.1 second'"
            " AND s.node = ANY(%s)"
            " AND NOT EXISTS (SELECT 1 FROM wf_events c WHERE c.instance_id = s.instance_id"
            " AND c.node = s.node AND c.event_type = 'NODE_COMPLETED')",
            (f"%:{pid}:%", slow),
        ).fetchone()
    return row is not None and int(row[0]) > 0


def _slow(b: DagBuilder, name: str) -> None:
    b.node(
        name,
        "python",
        function="mark",
        args={"run": "{{ctx.input.run}}", "name": name, "pause": 0.2},
    )


def _killed_mid_node(
    pg_dsn: str, pg_schema: str, tmp_path: Path, definition: DagDefinition, *, n: int, marked: int
) -> None:
    """``n`` instances over four runners, one killed (SIGKILL) mid-node: its leases run
    out, the others finish every instance, and no node run is completed (or dispatched)
    twice."""
    with _runners(pg_dsn, pg_schema, tmp_path, lease=2.0) as (store, marks, procs):
        client = DagClient(store)
        ids = [client.start(definition, {"run": f"k{i}"}) for i in range(n)]
        victim = procs[0]
        slow = [node.id for node in definition.nodes if node.type == "python"]
        # Kill the victim while it holds a node (its lease is live and the node started),
        # so that the kill lands mid-node whatever the machine's speed.
        deadline = time.monotonic() + 60
        while not _holds_a_node(pg_dsn, pg_schema, victim.pid, slow):
            assert time.monotonic() < deadline, "the victim never held a node"
            time.sleep(0.005)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        _wait_all(client, ids, timeout=120)
        assert {client.get(i).status for i in ids} == {Status.COMPLETED}
        assert set(_per_node(store, "NODE_COMPLETED").values()) == {1}
        assert set(_per_node(store, "NODE_DISPATCHED").values()) == {1}
        executions = Counter(marks.read_text().split("\n")[:-1])
        assert len(executions) == n * marked
        # At least once: a node killed mid-way runs again; never more than that here.
        thrice = [mark for mark, times in executions.items() if times > 2]
        assert not thrice, f"run more than twice: {thrice[:5]}"
        # The kill did land mid-node: some runs started by the victim were finished by others.
        taken_over = 0
        for iid in ids:
            hist = client.history(iid)
            for e in hist:
                if e.event_type == Ev.NODE_STARTED and f":{victim.pid}:" in str(e.worker):
                    done = [
                        c for c in hist if c.event_type == Ev.NODE_COMPLETED and c.node == e.node
                    ]
                    taken_over += all(f":{victim.pid}:" not in str(c.worker) for c in done)
        victims = [
            (e.instance_id, e.node, e.attempt, e.created_at)
            for iid in ids
            for e in client.history(iid)
            if e.event_type == Ev.NODE_STARTED and f":{victim.pid}:" in str(e.worker)
        ]
        assert taken_over >= 1, f"no node of the victim's was taken over: {victims[-5:]}"


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.crash
def test_sigkill_a_runner_mid_run(pg_dsn: str, pg_schema: str, tmp_path: Path) -> None:
    b = DagBuilder("slow_diamond")
    b.node("s", "start")
    for name in ("a", "l", "r", "join"):
        _slow(b, name)
    b.node("e", "end", outputs={"joined": "{{ctx.join}}"})
    b.chain("s", "a", "l", "join", "e")
    b.chain("a", "r", "join")
    _killed_mid_node(pg_dsn, pg_schema, tmp_path, b.build(), n=30, marked=4)


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.crash
def test_sigkill_a_runner_mid_fan_out(pg_dsn: str, pg_schema: str, tmp_path: Path) -> None:
    # Branches of one instance in four processes commit on their blockers' word: a kill
    # between two such commits leaves nothing half done (each is one statement).
    b = DagBuilder("slow_fan_out")
    b.node("s", "start")
    for name in [*(f"b{i}" for i in range(12)), "join"]:
        _slow(b, name)
    b.node("e", "end", outputs={"joined": "{{ctx.join}}"})
    for i in range(12):
        b.chain("s", f"b{i}", "join")
    b.edge("join", "e")
    _killed_mid_node(pg_dsn, pg_schema, tmp_path, b.build(), n=6, marked=13)


def test_duplicate_result_delivery_dispatches_nothing_twice(store: Store) -> None:
    client = DagClient(store)
    iid = client.start(h.diamond("all"), {})
    # Drive the instance by hand: claim each node task and deliver its result *twice*,
    # concurrently, as an at-least-once transport would.
    executor = DagExecutor(store, h.registry, worker="dup", loop=asyncio.new_event_loop)
    graph = LogView.of(store.events(iid)).graph()
    delivered: list[bool] = []
    for _ in range(20):
        claims = store.dag_claim(worker="dup", types=["swf.dag"], lease=30)
        if not claims:
            break
        for claim in claims:
            node = claim.task.slot
            run = LogView.of(store.events(iid)).run(node)
            result = NodeResult(node if node != "e" else {"d": "d"})
            barrier = threading.Barrier(2)

            def deliver(
                node: str, run: int, result: NodeResult, attempt: int, barrier: threading.Barrier
            ) -> None:
                barrier.wait()
                delivered.append(executor.complete(iid, graph, node, run, result, attempt=attempt))

            threads = [
                threading.Thread(
                    target=deliver, args=(node, run, result, claim.task.attempt, barrier)
                )
                for _ in range(2)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert client.get(iid).status == Status.COMPLETED
    assert delivered.count(True) == 6  # one accepted delivery per node
    assert delivered.count(False) == 6  # the duplicates: no-ops
    hist = client.history(iid)
    dispatched = Counter(e.node for e in hist if e.event_type == Ev.NODE_DISPATCHED)
    completed = Counter(e.node for e in hist if e.event_type == Ev.NODE_COMPLETED)
    assert set(dispatched.values()) == {1}
    assert set(completed.values()) == {1}
    assert len(dispatched) == 6


def test_result_and_schedule_commit_together_and_a_duplicate_loses_whole(store: Store) -> None:
    """A node's result and its successors' dispatch are one commit. A duplicate from
    another runner, decided on the same read, writes nothing: neither its result (the
    log's unique index) nor a second dispatch (the version)."""
    client = DagClient(store)
    iid = client.start(h.linear(2), {"x": 1})
    first = DagExecutor(store, h.registry, worker="r1", loop=asyncio.new_event_loop)
    second = DagExecutor(store, h.registry, worker="r2", loop=asyncio.new_event_loop)
    graph = LogView.of(store.events(iid)).graph()
    [claim] = store.dag_claim(worker="r1", types=["swf.dag"], lease=30)
    node, run = claim.task.slot, 1
    assert node == "s"
    snap = store.dag_snapshot(iid)
    assert snap is not None
    before = len(client.history(iid))
    # Both runners decide on the same read (the cache is per runner).
    first._cache.read(first._cache.entry(iid), iid)
    second._cache.read(second._cache.entry(iid), iid)
    assert first.complete(iid, graph, node, run, NodeResult(None), attempt=1, snap=snap)
    written = client.history(iid)[before:]
    assert [(e.event_type, e.node) for e in written] == [
        (Ev.NODE_COMPLETED, "s"),
        (Ev.NODE_DISPATCHED, "n0"),
    ]
    assert not second.complete(iid, graph, node, run, NodeResult("other"), attempt=1, snap=snap)
    assert client.history(iid)[before + 2 :] == []

    # A result recorded on its own (no version bump) is found by the unique index.
    [claim] = store.dag_claim(worker="r1", types=["swf.dag"], lease=30)
    snap = store.dag_snapshot(iid)
    assert snap is not None
    first._cache.read(first._cache.entry(iid), iid)
    assert store.dag_record(iid, recorded_result("n0", 1), worker="elsewhere")
    assert not first.complete(iid, graph, "n0", 1, NodeResult(2), attempt=1, snap=snap)
    dispatched = [e.node for e in client.history(iid) if e.event_type == Ev.NODE_DISPATCHED]
    assert dispatched == ["s", "n0"]  # nothing dispatched for the refused duplicate


def recorded_result(node: str, run: int) -> NewEvent:
    return NewEvent(Ev.NODE_COMPLETED, node, run, {"output": 2, "handle": None, "try": 1})
