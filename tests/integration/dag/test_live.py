"""Live updates of DAG instances on both stores: in log order, no duplicates, no polling.

Watchers here use ``resync=600``: an update that arrives within the test's time limit was
delivered by a notification (the store's commit path, another process's commit, LISTEN/
NOTIFY), never by the periodic safety re-read.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from statemachine_wf import NotFound, Status, Store
from statemachine_wf.client.live import Update, watch
from statemachine_wf.dag import DagBuilder, DagClient, DagDefinition
from statemachine_wf.definition.events import Ev
from statemachine_wf.stores import open_store
from statemachine_wf.stores._pglive import live_channel
from statemachine_wf.stores.postgres import PostgresStore
from tests.plugins.stores import listen_pids as plugged_listen_pids

from . import helpers as h

ROOT = Path(__file__).resolve().parents[3]
NO_RESYNC = 600.0

gates: dict[str, threading.Event] = {}


@h.registry.function("live_gate")
def live_gate(key: str) -> str:
    """Blocks the node until the test opens the gate (it fails the node after 30 s)."""
    if not gates.setdefault(key, threading.Event()).wait(30):
        raise TimeoutError(f"gate {key} never opened")
    return key


def gated_diamond(key: str) -> DagDefinition:
    """s -> a -> (l, r) -> d (join all) -> e; ``d`` waits for the test's gate."""
    b = DagBuilder("live_diamond")
    b.node("s", "start")
    h.py(b, "a", "tag", name="a")
    h.py(b, "l", "tag", name="l")
    h.py(b, "r", "tag", name="r")
    h.py(b, "d", "live_gate", key=key)
    b.node("e", "end", outputs={"d": "{{ctx.d}}"})
    b.chain("s", "a", "l", "d", "e")
    b.chain("a", "r", "d")
    return b.build()


async def collect(updates: AsyncIterator[Update], timeout: float = 60.0) -> list[Update]:
    async def drain() -> list[Update]:
        return [u async for u in updates]

    return await asyncio.wait_for(drain(), timeout)


async def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def assert_is_the_log(store: Store, instance_id: str, updates: list[Update]) -> None:
    seqs = [u.seq for u in updates]
    assert seqs == sorted(set(seqs)), "out of order or duplicated"
    assert [(u.seq, u.node, u.event_type) for u in updates] == [
        (e.seq, e.node, e.event_type) for e in store.events(instance_id)
    ]
    assert updates[-1].event_type == Ev.COMPLETED
    assert updates[-1].status == Status.COMPLETED
    assert updates[-1].terminal
    assert {u.status for u in updates[:-1]} == {Status.RUNNING}


def test_diamond_updates_arrive_as_they_commit_in_log_order(store: Store) -> None:
    key = f"diamond-{os.urandom(4).hex()}"
    dags = DagClient(store)
    iid = dags.start(gated_diamond(key))
    seen: list[Update] = []

    async def scenario() -> list[Update]:
        async def follow() -> list[Update]:
            async for update in watch(store, iid, resync=NO_RESYNC):
                seen.append(update)
                done = {u.node for u in seen if u.event_type == Ev.NODE_COMPLETED}
                if {"l", "r"} <= done:
                    gates.setdefault(key, threading.Event()).set()
            return seen

        task = asyncio.create_task(follow())
        await until(lambda: store.live_hub().active)
        with h.running(store):
            # The join only runs once the watcher has *received* both branches: updates
            # arrive while the instance runs, not replayed at its end.
            return await asyncio.wait_for(task, 60)

    updates = asyncio.run(scenario())
    assert_is_the_log(store, iid, updates)
    node_events = [(u.node, u.event_type) for u in updates if u.node is not None]
    for node in "salrde":
        assert [t for n, t in node_events if n == node] == [
            Ev.NODE_DISPATCHED,
            Ev.NODE_STARTED,
            Ev.NODE_COMPLETED,
        ]
    assert dags.output(iid) == {"d": key}
    assert not store.live_hub().active  # the watcher unsubscribed when it ended


def test_late_subscriber_replays_from_after_seq(store: Store) -> None:
    dags = DagClient(store)
    iid = dags.start(h.diamond())
    with h.running(store):
        dags.wait(iid)
    log = store.events(iid)
    seqs = [e.seq for e in log]

    async def replay(after: int) -> list[int]:
        return [u.seq for u in await collect(dags.watch(iid, after_seq=after))]

    assert asyncio.run(replay(0)) == seqs
    for k in (1, len(seqs) // 2, len(seqs) - 1):
        assert asyncio.run(replay(seqs[k - 1])) == seqs[k:]
    assert asyncio.run(replay(seqs[-1])) == []  # already over: ends at once


def test_resuming_a_watch_mid_run_loses_and_repeats_nothing(store: Store) -> None:
    key = f"resume-{os.urandom(4).hex()}"
    dags = DagClient(store)
    iid = dags.start(gated_diamond(key))

    async def scenario() -> tuple[list[Update], list[Update]]:
        first: list[Update] = []

        async def part_one() -> None:
            async for update in watch(store, iid, resync=NO_RESYNC):
                first.append(update)
                if update.node == "r" and update.event_type == Ev.NODE_STARTED:
                    return  # a subscriber that goes away mid-run

        with h.running(store):
            await asyncio.wait_for(part_one(), 60)
            gates.setdefault(key, threading.Event()).set()
            rest = await collect(watch(store, iid, after_seq=first[-1].seq, resync=NO_RESYNC))
        return first, rest

    first, rest = asyncio.run(scenario())
    assert_is_the_log(store, iid, first + rest)


@pytest.mark.slow
def test_updates_from_a_runner_process(
    store_url: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    """The runner is another process: Postgres delivers through LISTEN/NOTIFY, SQLite
    through its watcher of other processes' commits."""
    url, options = store_url
    store = open_store(url, **options)
    store.migrate()
    dags = DagClient(store)
    b = DagBuilder("live_marked_diamond")
    b.node("s", "start")
    for name in ("a", "l", "r", "d"):
        b.node(name, "python", function="mark", args={"run": "x", "name": name})
    b.node("e", "end", outputs={"d": "{{ctx.d}}"})
    b.chain("s", "a", "l", "d", "e")
    b.chain("a", "r", "d")
    iids = [dags.start(b.build()) for _ in range(3)]

    async def scenario() -> list[list[Update]]:
        tasks = [asyncio.create_task(collect(watch(store, i, resync=NO_RESYNC))) for i in iids]
        await until(lambda: store.live_hub().active)
        with runner_process(url, options.get("schema", "-"), tmp_path):
            return await asyncio.wait_for(asyncio.gather(*tasks), 90)

    try:
        results = asyncio.run(scenario())
        for iid, updates in zip(iids, results, strict=True):
            assert_is_the_log(store, iid, updates)
            workers = {u.event.worker for u in updates if u.event_type == Ev.NODE_STARTED}
            assert len(workers) == 1
            assert None not in workers
    finally:
        store.close()


@contextmanager
def runner_process(url: str, schema: str, tmp_path: Path) -> Iterator[None]:
    log = (tmp_path / "runner.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.dag.worker_main",
            url,
            schema,
            str(tmp_path / "marks.txt"),
            "4",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(b"READY")
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
        log.close()


def test_watching_nothing_or_a_deleted_run_is_an_error(store: Store) -> None:
    dags = DagClient(store)

    async def first(iid: str, **kw: Any) -> Update:
        async for update in watch(store, iid, **kw):
            return update
        raise AssertionError("no update")

    with pytest.raises(NotFound):
        asyncio.run(first("00000000-0000-0000-0000-000000000000"))
    with pytest.raises(ValueError, match="after_seq"):
        asyncio.run(collect(watch(store, "x", after_seq=-1)))
    with pytest.raises(ValueError, match="resync"):
        asyncio.run(collect(watch(store, "x", resync=0)))

    # A test run stopped while watched: its rows are gone, the watcher says so.
    iid = dags.test_run(h.linear(2))

    async def watch_then_stop() -> list[Update]:
        got: list[Update] = []
        async for update in watch(store, iid, resync=0.2):
            got.append(update)
            if len(got) == 1:
                await asyncio.to_thread(dags.stop_test_run, iid)
        return got

    with pytest.raises(NotFound, match="deleted"):
        asyncio.run(watch_then_stop())
    assert not store.live_hub().active


# -- Postgres specifics --------------------------------------------------------------------


def _listen(dsn: str, schema: str) -> psycopg.Connection[tuple[object, ...]]:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f'LISTEN "{live_channel(schema)}"')
    return conn


def _payloads(conn: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=0.5)]


@pytest.mark.postgres
def test_pg_notifies_once_per_decision_and_only_while_watched(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    dags = DagClient(pg_store)
    listener = _listen(pg_dsn, pg_schema)
    try:
        unwatched = dags.start(h.diamond())
        with h.running(pg_store):
            dags.wait(unwatched)
        assert _payloads(listener) == []  # nobody watched: no NOTIFY, no commit serialised

        key = f"pg-{os.urandom(4).hex()}"
        watched = dags.start(gated_diamond(key))

        async def scenario() -> list[Update]:
            task = asyncio.create_task(collect(watch(pg_store, watched, resync=NO_RESYNC)))
            await until(lambda: pg_store.live_hub().active)
            await asyncio.sleep(0.2)  # registered (subscribe returned) before anything runs
            with h.running(pg_store):
                gates.setdefault(key, threading.Event()).set()
                return await task

        updates = asyncio.run(scenario())
        payloads = _payloads(listener)
    finally:
        listener.close()
    after_watch = updates[2:]  # the start's two events were committed before the watch
    # One notification per committed statement: events of one statement share its
    # transaction's timestamp; the payload carries the statement's highest seq.
    statements: dict[float, int] = {}
    for u in after_watch:
        statements[u.event.created_at] = max(statements.get(u.event.created_at, 0), u.seq)
    assert payloads == [f"{watched} {seq}" for seq in sorted(statements.values())]
    assert len(payloads) < len(after_watch)
    with pg_store._conn() as conn:
        assert conn.execute("SELECT count(*) AS n FROM wf_live_watches").fetchone() == {"n": 0}


@pytest.mark.postgres
def test_pg_watcher_survives_losing_its_listen_connection(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    key, other_key = f"reconnect-{os.urandom(4).hex()}", f"keep-{os.urandom(4).hex()}"
    dags = DagClient(pg_store)
    iid = dags.start(gated_diamond(key))
    other = dags.start(gated_diamond(other_key))  # watched throughout: the listener stays
    admin = psycopg.connect(pg_dsn, autocommit=True)

    def listen_pids() -> list[int]:
        return plugged_listen_pids(admin, live_channel(pg_store.schema))

    async def scenario() -> list[Update]:
        seen: list[Update] = []

        async def follow() -> list[Update]:
            async for update in watch(pg_store, iid, resync=NO_RESYNC):
                seen.append(update)
            return seen

        async def keep() -> None:
            async for _ in watch(pg_store, other, resync=NO_RESYNC):
                pass

        task = asyncio.create_task(follow())
        # A second subscriber until the end: the listener is wanted after the first watch
        # ends, which it may do before the reconnect (told of the loss at once, it re-reads
        # the log, and the run's last commits can be in it by then).
        keeper = asyncio.create_task(keep())
        with h.running(pg_store):
            await until(
                lambda: any(u.node == "d" and u.event_type == Ev.NODE_STARTED for u in seen)
            )
            (old,) = listen_pids()
            admin.execute("SELECT pg_terminate_backend(%s)", (old,))
            # The rest of the run commits while the listener is down or reconnecting.
            await until(lambda: old not in listen_pids())
            gates.setdefault(key, threading.Event()).set()
            await asyncio.to_thread(dags.wait, iid)
            updates = await asyncio.wait_for(task, 60)
            # It reconnects a second after the loss (while the keeper still watches).
            await until(lambda: listen_pids() not in ([], [old]), timeout=15)
            gates.setdefault(other_key, threading.Event()).set()
            await asyncio.wait_for(keeper, 60)
            return updates

    try:
        updates = asyncio.run(scenario())
    finally:
        admin.close()
    assert_is_the_log(pg_store, iid, updates)


@pytest.mark.postgres
def test_pg_instance_events_commit_in_seq_order(pg_store: PostgresStore, pg_dsn: str) -> None:
    """Every event of an instance is appended under its row lock: a result recorded while
    another transaction holds it waits (so it cannot commit a lower seq after a reader saw
    a higher one), and a claim skips that instance's tasks instead of waiting."""
    from statemachine_wf.definition.events import NewEvent

    dags = DagClient(pg_store)
    iid = dags.start(h.linear(1))
    holder = psycopg.connect(pg_dsn, autocommit=False, options=f"-c search_path={pg_store.schema}")
    done = threading.Event()

    def record() -> None:
        pg_store.dag_record(iid, NewEvent(Ev.NODE_COMPLETED, node="x", attempt=1), worker="w")
        done.set()

    thread = threading.Thread(target=record)
    try:
        holder.execute("SELECT 1 FROM wf_instances WHERE id = %s FOR NO KEY UPDATE", (iid,))
        # The start node's task is due, but its instance is locked: nothing to claim.
        assert pg_store.dag_claim(worker="w", types=["swf.dag"], lease=30) == []
        thread.start()
        deadline = time.monotonic() + 30
        while not done.is_set() and not _waiting_on_lock(pg_dsn):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not done.is_set(), "dag_record did not wait for the instance's row lock"
    finally:
        holder.rollback()
        holder.close()
        if thread.is_alive() or thread.ident is not None:
            thread.join(30)
    assert done.is_set()
    claims = pg_store.dag_claim(worker="w", types=["swf.dag"], lease=30)
    assert [c.task.slot for c in claims] == ["s"]


def _waiting_on_lock(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND query LIKE '%%INSERT INTO wf_events%%'"
        ).fetchone()
    return row is not None and int(row[0]) > 0
