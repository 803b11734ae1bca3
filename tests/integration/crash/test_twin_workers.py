"""Two real runner processes started with the same worker id (issue 9 item 4).

The second one's start-up must not hand back the first one's live leases (a step would
run twice), and the live twin's heartbeat must not keep a dead twin's leases alive (its
work would wait forever). Leases are fenced by the claim's lease token, whose prefix is
the claiming runner's incarnation (host:pid:random).
"""

from __future__ import annotations

import os
import signal

import pytest

from statemachine_wf.client.machine import Client
from statemachine_wf.definition.events import Status

from .harness import Children, Target, assert_durable, poll_until
from .workflows import Ledgered


@pytest.mark.crash
@pytest.mark.slow
def test_twin_worker_ids_never_run_a_step_twice_and_a_dead_twins_leases_lapse(
    target: Target,
) -> None:
    n = 16
    store = target.open_store()
    ledger = target.open_ledger()
    try:
        with Children(target) as kids:
            client = Client(store)
            # 0.3 s per action keeps steps in flight for the whole test.
            ids = [client.start(Ledgered, {"n": i, "delay": 0.3}) for i in range(n)]
            first = kids.spawn("twin", lease=2.0, concurrency=2)
            poll_until(
                lambda: len(store.lease_incarnations(worker="twin")) == 1,
                timeout=30,
                what="the first twin holding leases",
                interval=0.01,
            )
            held_by_first = store.lease_incarnations(worker="twin")
            kids.spawn("twin", lease=2.0, concurrency=2)  # READY: its start-up pass ran
            poll_until(
                lambda: len(store.lease_incarnations(worker="twin")) == 2,
                timeout=30,
                what="both twins holding leases",
                interval=0.01,
            )
            # While both live, no step ran twice: the second's start-up released nothing
            # of the first's (before the fix it released them and re-ran those steps).
            runs = ledger.runs()
            assert runs
            assert set(runs.values()) == {1}, runs
            assert held_by_first[0] in store.lease_incarnations(worker="twin")

            os.kill(first.pid, signal.SIGKILL)
            assert first.wait(timeout=10) == -signal.SIGKILL
            # The survivor (same worker id, heartbeating) must not keep the dead one's
            # leases alive: they lapse after 2 s and the survivor finishes everything.
            poll_until(
                lambda: all(client.get(i).status == Status.COMPLETED for i in ids),
                timeout=90,
                what=f"{n} instances after one twin was killed",
                interval=0.25,
            )
        assert_durable(store, ledger, ids)  # one STEP_COMPLETED and one side effect each
    finally:
        ledger.close()
        store.close()
