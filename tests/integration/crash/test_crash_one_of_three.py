"""Recovery with real processes (seed 003, section 11.1: one node down): three runner
processes share a Postgres schema, the test SIGKILLs one of them while it holds leases
mid-run, and the other two carry on, take over its leases when they expire, and complete
every instance with no step done twice."""

from __future__ import annotations

import os
import signal
import time
from functools import partial

import pytest

from statemachine_wf.client.machine import Client
from statemachine_wf.definition.events import Ev

from .harness import Children, Target, assert_durable, poll_until, sql_scalar, wait_completed
from .workflows import STEPS, Ledgered


@pytest.mark.crash
@pytest.mark.postgres
@pytest.mark.slow
def test_one_of_three_runners_sigkilled_the_others_take_over(pg_target: Target) -> None:
    n = 240
    store = pg_target.open_store()
    ledger = pg_target.open_ledger()
    sql = pg_target.open_sql()
    scalar = partial(sql_scalar, sql)

    try:
        workers = ["node-a", "node-b", "node-c"]
        with Children(pg_target) as kids:
            procs = {w: kids.spawn(w, lease=2.0, concurrency=2) for w in workers}
            client = Client(store)
            # 20 ms per action keeps steps in flight, so the victim dies holding some.
            ids = [client.start(Ledgered, {"n": i, "delay": 0.02}) for i in range(n)]

            def victim_mid_run() -> bool:
                done = scalar("SELECT count(*) FROM wf_instances WHERE status = 'COMPLETED'")
                held = scalar(
                    "SELECT count(*) FROM wf_tasks WHERE lease_owner = 'node-a' AND in_flight"
                )
                return bool(n // 10 <= done < n // 2 and held > 0)

            poll_until(victim_mid_run, timeout=60, what="node-a mid-run with leases", interval=0.01)
            os.kill(procs["node-a"].pid, signal.SIGKILL)
            assert procs["node-a"].wait(timeout=10) == -signal.SIGKILL
            # A statement the victim sent just before it died still commits on its backend
            # (a finish, which deletes the task); read the leases once that has landed. Its
            # leases (2 s, beaten every 2/3 s) outlive the pause: nobody has taken over yet.
            time.sleep(0.3)
            orphaned = [
                str(r[0])
                for r in sql.execute(
                    "SELECT instance_id FROM wf_tasks WHERE lease_owner = 'node-a'"
                ).fetchall()
            ]
            completed_at_kill = scalar(
                "SELECT count(*) FROM wf_instances WHERE status = 'COMPLETED'"
            )
            assert orphaned, "the victim held no lease when it died"

            wait_completed(scalar, n, what=f"{n} instances after node-a was killed")
            for w in ("node-b", "node-c"):
                kids.terminate(procs[w])

        assert completed_at_kill < n  # the kill really was mid-run
        # No step done twice: one STEP_COMPLETED per (instance, step), one side effect each.
        twice = sql.execute(
            "SELECT instance_id, node, count(*) FROM wf_events WHERE event_type = %s"
            " GROUP BY 1, 2 HAVING count(*) <> 1",
            (str(Ev.STEP_COMPLETED),),
        ).fetchall()
        assert twice == []
        assert scalar(
            "SELECT count(*) FROM wf_events WHERE event_type = %s", str(Ev.STEP_COMPLETED)
        ) == n * len(STEPS)
        assert_durable(store, ledger, ids)

        # Every lease the victim held was taken over: its instances were finished by the
        # survivors, whose claims wrote the STEP_STARTED of the step it had in flight.
        for instance_id in orphaned:
            events = store.events(instance_id)
            finishers = {e.worker for e in events if e.event_type == Ev.STEP_COMPLETED}
            assert finishers - {"node-a"}, f"{instance_id} never taken over: {finishers}"
            assert events[-1].event_type == Ev.COMPLETED
        by_worker = dict(
            sql.execute(
                "SELECT worker, count(*) FROM wf_events WHERE event_type = 'STEP_COMPLETED'"
                " GROUP BY 1"
            ).fetchall()
        )
        assert set(by_worker) == set(workers)  # all three worked, two carried on
        # Only the steps the victim had in flight ran again (idempotently, per the ledger).
        reruns = sum(c - 1 for c in ledger.runs().values())
        assert reruns <= len(orphaned)
    finally:
        sql.close()
        ledger.close()
        store.close()
