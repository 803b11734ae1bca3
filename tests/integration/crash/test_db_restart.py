"""The database goes away under running runners and comes back (seed 003, section 11).

Each test owns a throwaway PostgreSQL cluster (``throwaway_pg``), starts two runner
processes on it, starts work, and then takes the server down in the middle of the run:
a clean restart (``pg_ctl -m fast``: sessions closed, server gone for two seconds) and a
crash (SIGKILL of the postmaster, then start: crash recovery). The runners are not
touched: they must reconnect on their own and finish everything, each step's side effect
exactly once, no instance quarantined or failed for the outage.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from statemachine_wf.client.machine import Client
from statemachine_wf.definition.events import Status
from tests.plugins.throwaway_pg import Cluster

from .harness import Children, Target, assert_durable, count_completed, poll_until
from .workflows import Ledgered

N = 60


def _target(cluster: Cluster, tmp_path: Path) -> Target:
    return Target(
        kind="postgres",
        url=cluster.dsn,
        schema="swf",
        ledger_spec=f"sqlite:{tmp_path / 'ledger.db'}",
        log_dir=tmp_path,
    )


def _completed_despite_outage(cluster: Cluster, tmp_path: Path, outage: str) -> None:
    target = _target(cluster, tmp_path)
    store = target.open_store()
    ledger = target.open_ledger()
    try:
        with Children(target) as kids:
            procs = [kids.spawn(w, lease=2.0, concurrency=2) for w in ("db-1", "db-2")]
            client = Client(store)
            ids = [client.start(Ledgered, {"n": i, "delay": 0.05}) for i in range(N)]
            poll_until(
                lambda: count_completed(store, ids) >= N // 6,
                timeout=60,
                what="the first instances to complete",
            )
            done_before = count_completed(store, ids)
            if outage == "restart":
                cluster.stop("fast")
                time.sleep(2.0)
            else:
                cluster.kill()
            cluster.start()

            def all_done() -> bool:
                try:
                    return count_completed(store, ids) == N
                except Exception:  # the test's own pool reconnects too
                    return False

            poll_until(all_done, timeout=120, what=f"all {N} instances after the outage")
            assert done_before < N, "the outage came after the run: nothing was tested"
            for proc in procs:
                assert proc.poll() is None, "a runner died of the outage:\n" + kids.log_tail(proc)
                kids.terminate(proc)
        assert_durable(store, ledger, ids)
        assert store.dead_letters() == []
        assert all(store.get(i).status == Status.COMPLETED for i in ids)  # type: ignore[union-attr]
    finally:
        ledger.close()
        store.close()


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.postgres
def test_runners_reconnect_after_a_database_restart(throwaway_pg: Cluster, tmp_path: Path) -> None:
    _completed_despite_outage(throwaway_pg, tmp_path, "restart")


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.postgres
def test_runners_reconnect_after_a_database_crash(throwaway_pg: Cluster, tmp_path: Path) -> None:
    _completed_despite_outage(throwaway_pg, tmp_path, "crash")
