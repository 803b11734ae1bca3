"""What a user meets when the database goes away and comes back (issue 14).

Each test owns a throwaway PostgreSQL cluster (``throwaway_pg``; never the shared server):

* a ``Client`` call right after a restart (clean, or a crash of the postmaster) succeeds,
  although every pooled connection died with the old server;
* a ``Client`` call while the database is down raises ``StoreUnavailable`` once its
  ``pool_timeout`` is over, and the store says so in one WARNING, and once more when the
  database is back: no pool warnings, no tracebacks;
* a runner process keeps going through an outage and completes the work that fell due
  meanwhile, with one WARNING line for the outage and one for the return.

Timings are printed (run with ``-s``), never asserted: ``SWF_TEST_DB_OUTAGE`` sets the
outage of the runner test (seconds, default 3) for measuring by hand, and
``SWF_TEST_DB_OUTAGE_KIND=crash`` makes it a SIGKILL of the postmaster (default: a clean
``pg_ctl -m fast`` stop).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from statemachine_wf.client.machine import Client
from statemachine_wf.definition.events import Status
from statemachine_wf.errors import StoreUnavailable
from statemachine_wf.stores.postgres import PostgresStore
from tests.plugins.throwaway_pg import Cluster

from .harness import Children, Target, count_completed, poll_until, sql_scalar
from .workflows import Ledgered

pytestmark = [pytest.mark.crash, pytest.mark.slow, pytest.mark.postgres]


def _busy(store: PostgresStore, threads: int = 4) -> None:
    """Make the pool open several connections (each one dies with the server)."""

    def reads() -> None:
        for _ in range(30):
            store.dead_letters(limit=1)

    workers = [threading.Thread(target=reads) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()


def _store_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("outage", ["restart", "crash"])
def test_a_client_call_right_after_a_restart_succeeds(
    throwaway_pg: Cluster, outage: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresStore(throwaway_pg.dsn, schema="swf")
    try:
        store.migrate()
        client = Client(store, [Ledgered])
        first = client.start(Ledgered, {"n": 1})
        _busy(store)
        if outage == "restart":
            throwaway_pg.stop("fast")
        else:
            throwaway_pg.kill()
        throwaway_pg.start()
        caplog.clear()
        # Every call of these would have met a connection of the old server.
        assert client.get(first).status == Status.PENDING
        second = client.start(Ledgered, {"n": 2}, idempotency_key="after-restart")
        third = client.start(Ledgered, {"n": 3})
        assert client.start(Ledgered, {"n": 2}, idempotency_key="after-restart") == second
        assert [client.status(i) for i in (first, second, third)] == [Status.PENDING] * 3
        assert client.signal_counts(first).get("pending", 0) == 0
        assert client.dead_letters() == []
        assert len(store.list_instances()) == 3  # the retries wrote nothing twice
        warnings = _store_warnings(caplog)  # no pool warnings: the restart, said once
        assert len(warnings) == 2, warnings
        assert "unavailable (the server closed a connection" in warnings[0]
        assert "is back after" in warnings[1]
    finally:
        store.close()


def test_a_client_during_an_outage_fails_and_says_it_once(
    throwaway_pg: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresStore(throwaway_pg.dsn, schema="swf", pool_timeout=1.0)
    try:
        store.migrate()
        client = Client(store, [Ledgered])
        first = client.start(Ledgered, {"n": 1})
        _busy(store)
        throwaway_pg.stop("fast")
        caplog.clear()
        for _ in range(3):
            with pytest.raises(StoreUnavailable):
                client.get(first)
        with pytest.raises(StoreUnavailable):
            client.start(Ledgered, {"n": 2})
        throwaway_pg.start()
        poll_until(lambda: _answers(client, first), timeout=30, what="the database's return")
        assert client.start(Ledgered, {"n": 3})
        warnings = _store_warnings(caplog)
        assert len(warnings) == 2, warnings
        assert warnings[0].startswith("statemachine_wf.postgres: database ")
        assert "unavailable" in warnings[0]
        assert "is back after" in warnings[1]
        assert not any(r.exc_info for r in caplog.records if r.levelno >= logging.WARNING)
        assert len(store.list_instances()) == 2  # the failed start wrote nothing
    finally:
        store.close()


def test_the_live_listener_says_once_that_it_lost_the_database(
    throwaway_pg: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """One WARNING for the outage and one INFO for the return, not one per retry."""
    store = PostgresStore(throwaway_pg.dsn, schema="swf", pool_timeout=1.0)
    loop = asyncio.new_event_loop()
    hub = store.live_hub()
    try:
        store.migrate()
        iid = Client(store, [Ledgered]).start(Ledgered, {"n": 1})
        sub = hub.subscribe(iid, loop)
        caplog.set_level(logging.DEBUG, logger="statemachine_wf")
        caplog.clear()
        throwaway_pg.stop("fast")
        time.sleep(3.5)  # the listener retries every second meanwhile
        throwaway_pg.start()
        poll_until(
            lambda: any("live listener reconnected" in r.getMessage() for r in caplog.records),
            timeout=30,
            what="the listener's return",
        )
        lost = [r for r in caplog.records if "live listener connection lost" in r.getMessage()]
        assert len(lost) >= 2, "it retried while the database was away"
        assert [r.levelno for r in lost].count(logging.WARNING) == 1, lost
        hub.unsubscribe(sub)
    finally:
        loop.close()
        store.close()


def _answers(client: Client, instance_id: str) -> bool:
    try:
        client.get(instance_id)
    except StoreUnavailable:
        return False
    return True


def test_a_runner_resumes_after_an_outage_and_completes_waiting_work(
    throwaway_pg: Cluster, tmp_path: Path
) -> None:
    outage = float(os.environ.get("SWF_TEST_DB_OUTAGE", "3"))
    target = Target(
        kind="postgres",
        url=throwaway_pg.dsn,
        schema="swf",
        ledger_spec=f"sqlite:{tmp_path / 'ledger.db'}",
        log_dir=tmp_path,
    )
    store = target.open_store()
    ledger = target.open_ledger()
    try:
        with Children(target) as kids:
            proc = kids.spawn("away-1", lease=2.0, concurrency=3)
            client = Client(store)
            now = [client.start(Ledgered, {"n": i}) for i in range(4)]
            poll_until(lambda: count_completed(store, now) == len(now), timeout=60, what="warm-up")
            # Due while the database is away: nothing can run them until it is back.
            later = [client.start(Ledgered, {"n": i}, delay=outage / 2) for i in range(6)]
            stopped = time.time()
            if os.environ.get("SWF_TEST_DB_OUTAGE_KIND") == "crash":
                throwaway_pg.kill()  # SIGKILL of the postmaster
            else:
                throwaway_pg.stop("fast")
            time.sleep(outage)  # the outage itself, not an assertion
            throwaway_pg.start()
            back = time.time()
            poll_until(
                lambda: count_completed(store, later) == len(later),
                timeout=120,
                what="the work that fell due during the outage",
            )
            assert proc.poll() is None, kids.log_tail(proc)
            kids.terminate(proc)
            log = kids.log_tail(proc, lines=1000)
        with target.open_sql() as sql:
            first = sql_scalar(
                sql,
                "SELECT extract(epoch FROM min(created_at)) FROM wf_events"
                " WHERE created_at > to_timestamp(%s) AND worker IS NOT NULL",
                stopped,
            )
        # Negative: the runner was at work before `pg_ctl start -w` returned.
        print(
            f"\noutage {outage:.1f} s: the runner's first event "
            f"{float(first) - back:.2f} s after the database was back "
            f"({datetime.fromtimestamp(back).time()})"
        )
        assert all(client.get(i).status == Status.COMPLETED for i in now + later)
        assert all(client.verify(i) == {} for i in now + later)
        away = [line for line in log.splitlines() if "unavailable" in line]
        returned = [line for line in log.splitlines() if "is back after" in line]
        assert len(away) == 1, log
        assert len(returned) == 1, log
        assert "Traceback" not in log, log
    finally:
        ledger.close()
        store.close()
