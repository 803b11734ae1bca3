"""DAG node commits never wait for the connections the store's other calls hold (PostgreSQL).

The store's calls hold at most ``pool_size`` connections at once; a thread that finds
them all busy waits, and a state machine's decision waiting so joins the next group
statement. A DAG node's commit shares no statement, so it takes one of
``dag_connections`` more instead of waiting, when the store has them (none by default:
docs/architecture.md, "Connections").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import psycopg
import pytest

from statemachine_wf import Runner, RunnerOptions, Status
from statemachine_wf.dag import DagClient
from statemachine_wf.errors import StoreUnavailable
from statemachine_wf.stores.postgres import PostgresStore
from tests.integration.dag import helpers as h

pytestmark = pytest.mark.postgres


class Counted(PostgresStore):
    """A store that counts its DAG node commits."""

    lone = 0

    def _lone_commit(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        self.lone += 1
        return super()._lone_commit()


@pytest.fixture
def one_connection(pg_dsn: str, pg_schema: str) -> Iterator[Counted]:
    store = Counted(pg_dsn, schema=pg_schema, pool_size=1, dag_connections=1, pool_timeout=0.5)
    store.migrate()
    yield store
    store.close()


@pytest.fixture
def held(one_connection: Counted) -> Iterator[threading.Event]:
    """The one connection of the store's other calls, held by another thread meanwhile."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with one_connection._statement():
            taken.set()
            done.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(10)
    yield done
    done.set()
    thread.join(10)


def test_a_dag_commit_takes_a_connection_while_the_others_are_all_held(
    one_connection: Counted, held: threading.Event
) -> None:
    started = time.monotonic()
    with one_connection._lone_commit() as conn:
        assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
    assert time.monotonic() - started < 0.4  # under pool_timeout: it did not wait
    # Any other call waits for the held one, and gives up after pool_timeout.
    with pytest.raises(StoreUnavailable, match=r"couldn't get a connection after 0\.50 sec"):
        one_connection.get("00000000-0000-0000-0000-000000000000")


def test_without_dag_connections_a_dag_commit_waits_like_any_call(
    pg_dsn: str, pg_schema: str
) -> None:
    store = PostgresStore(pg_dsn, schema=pg_schema, pool_size=1, pool_timeout=0.5)
    store.migrate()
    try:
        with store._statement(), pytest.raises(StoreUnavailable), store._lone_commit():
            pass
    finally:
        store.close()


def test_a_dag_runs_its_node_commits_on_the_dag_connections(one_connection: Counted) -> None:
    dags = DagClient(one_connection)
    iid = dags.start(h.linear(3), {"x": 1})
    runner = Runner(one_connection, [], dags=h.registry, options=RunnerOptions(concurrency=4))
    runner.run_until_idle(timeout=60)
    assert dags.get(iid).status == Status.COMPLETED
    assert one_connection.lone >= 5  # start, three nodes and end: a commit each


@pytest.mark.parametrize("bad", [{"pool_size": 0}, {"dag_connections": -1}])
def test_a_bad_size_is_refused_naming_it(pg_dsn: str, pg_schema: str, bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="pool_size must be >= 1 and dag_connections >= 0"):
        PostgresStore(pg_dsn, schema=pg_schema, **bad)
