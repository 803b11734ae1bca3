"""A runner's worker threads hold at most ``runner_connections`` of the pool (PostgreSQL).

The others serve the process's own calls (a start, a signal, a read), which never wait
behind the runner's statements; a worker's call made while it holds one (a read inside
its statement's connection) is under the same one. docs/architecture.md, "Connections".
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import psycopg
import pytest

from statemachine_wf import Client, Runner, RunnerOptions, Status
from statemachine_wf.core.workers import in_worker_thread, worker_thread
from statemachine_wf.errors import StoreUnavailable
from statemachine_wf.stores.postgres import PostgresStore
from tests.unit.core.workflows import CountInput, ThreeSteps

pytestmark = pytest.mark.postgres

MISSING = "00000000-0000-0000-0000-000000000000"


class Counted(PostgresStore):
    """Counts the connections the worker threads hold at once, and the most seen."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._count_lock = threading.Lock()
        self.held = 0
        self.most = 0
        self.by_others = 0

    @contextmanager
    def _conn(self, *, gated: bool = True) -> Iterator[psycopg.Connection[Any]]:
        with super()._conn(gated=gated) as conn:
            mine = in_worker_thread()
            with self._count_lock:
                if mine:
                    self.held += 1
                    self.most = max(self.most, self.held)
                else:
                    self.by_others += 1
            try:
                yield conn
            finally:
                if mine:
                    with self._count_lock:
                        self.held -= 1


@pytest.fixture
def make_store(pg_dsn: str, pg_schema: str) -> Iterator[Callable[..., Counted]]:
    made: list[Counted] = []

    def make(**options: Any) -> Counted:
        store = Counted(pg_dsn, schema=pg_schema, **options)
        store.migrate()
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


def _hold(store: PostgresStore, *, worker: bool) -> tuple[threading.Event, threading.Event]:
    """A thread (a worker's, or not) that takes a connection and holds it until released:
    (taken, release)."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with worker_thread() if worker else nullcontext(), store._statement():
            taken.set()
            release.wait(30)

    threading.Thread(target=hold, daemon=True).start()
    return taken, release


def test_worker_threads_wait_for_their_share_and_the_others_do_not(
    make_store: Callable[..., Counted],
) -> None:
    store = make_store(pool_size=4, runner_connections=2, pool_timeout=20)
    first, second, third = (_hold(store, worker=True) for _ in range(3))
    assert first[0].wait(10)
    assert second[0].wait(10)
    # The third worker waits for one of the two: the pool's other two are not its.
    assert not third[0].wait(0.5)
    # A start, a read made by another thread meanwhile takes one of those at once.
    other, other_release = _hold(store, worker=False)
    assert other.wait(10)
    assert store.get(MISSING) is None
    other_release.set()
    first[1].set()  # a worker lets go of its connection: the third takes it
    assert third[0].wait(10)
    assert store.most == 2
    for _, release in (second, third):
        release.set()


def test_a_workers_share_runs_out_as_the_pool_would(
    make_store: Callable[..., Counted],
) -> None:
    store = make_store(pool_size=2, runner_connections=1, pool_timeout=0.5)
    taken, release = _hold(store, worker=True)
    assert taken.wait(10)
    try:
        with worker_thread(), pytest.raises(StoreUnavailable, match=r"after 0\.50 sec"):
            store.get(MISSING)
        assert store.get(MISSING) is None  # not a worker: the pool's other connection
    finally:
        release.set()


def test_a_worker_call_inside_its_own_connection_takes_no_second_share(
    make_store: Callable[..., Counted],
) -> None:
    store = make_store(pool_size=2, runner_connections=1, pool_timeout=0.5)
    with worker_thread(), store._statement() as conn:
        assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
        assert store.get(MISSING) is None  # the pool's second connection, under the same share


def test_a_runner_marks_its_workers_and_keeps_to_its_share_while_starts_go_on(
    make_store: Callable[..., Counted],
) -> None:
    store = make_store(pool_size=3, runner_connections=1)
    client = Client(store, [ThreeSteps])
    runner = Runner(store, [ThreeSteps], options=RunnerOptions(concurrency=8))
    runner.start()
    try:
        ids = [client.start(ThreeSteps, CountInput(n=i)) for i in range(120)]
        for iid in ids:
            assert client.wait(iid, timeout=120).status == Status.COMPLETED
    finally:
        runner.stop(timeout=30)
    assert store.most == 1  # eight workers, one connection at a time between them
    assert store.by_others >= len(ids)  # the starts: not the workers'


def test_at_pool_size_or_more_the_workers_share_the_whole_pool(
    make_store: Callable[..., Counted],
) -> None:
    store = make_store(pool_size=2, runner_connections=5, pool_timeout=20)
    assert store._share.size == 2
    first, second = (_hold(store, worker=True) for _ in range(2))
    assert first[0].wait(10)
    assert second[0].wait(10)
    assert store.most == 2
    for _, release in (first, second):
        release.set()


@pytest.mark.parametrize("bad", [0, -1])
def test_a_bad_share_is_refused_naming_it(pg_dsn: str, pg_schema: str, bad: int) -> None:
    with pytest.raises(ValueError, match=f"runner_connections must be >= 1, got {bad}"):
        PostgresStore(pg_dsn, schema=pg_schema, runner_connections=bad)
