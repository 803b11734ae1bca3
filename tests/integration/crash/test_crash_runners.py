"""Several runner processes on one store, and a graceful SIGTERM in the middle of a run.

* Four runner processes on one Postgres schema drive 1,000 instances: all complete, every
  step is started and completed exactly once (counted in SQL), the rows equal the fold of
  their logs, and every instance was driven by one of the four runners.
* Two runner processes on the same SQLite file share the work without a step running
  twice.
* SIGTERM stops a runner gracefully: it exits 0 within seconds, leaves no lease and no
  step in flight behind, and a restarted runner finishes with no action run twice.
"""

from __future__ import annotations

import signal
from collections import Counter
from functools import partial
from typing import Any

import pytest

from statemachine_wf.client.machine import Client
from statemachine_wf.core.store import Store
from statemachine_wf.definition.events import Ev

from .harness import (
    Children,
    Target,
    assert_durable,
    count_completed,
    poll_until,
    sql_scalar,
    wait_completed,
)
from .workflows import STEPS, Ledgered


def _drivers(store: Store, ids: list[str]) -> dict[str, set[str | None]]:
    """instance -> the workers that wrote its step events, but for the start of an attempt
    handed back before it ran (its STEP_RELEASED: a start leased to a busy runner, taken
    back after Offers.spare_wait, which no lease waited for)."""
    out: dict[str, set[str | None]] = {}
    for i in ids:
        log = store.events(i)
        unrun = {(e.node, e.attempt) for e in log if e.event_type == Ev.STEP_RELEASED}
        out[i] = {
            e.worker
            for e in log
            if e.event_type == Ev.STEP_COMPLETED
            or (e.event_type == Ev.STEP_STARTED and (e.node, e.attempt) not in unrun)
        }
    return out


@pytest.mark.crash
@pytest.mark.slow
def test_two_runner_processes_share_one_sqlite_file(sqlite_target: Target) -> None:
    store = sqlite_target.open_store()
    ledger = sqlite_target.open_ledger()
    try:
        workers = ["sq-1", "sq-2"]
        with Children(sqlite_target) as kids:
            procs = [kids.spawn(w, lease=30.0, concurrency=2) for w in workers]
            client = Client(store)
            ids = [client.start(Ledgered, {"n": i, "delay": 0.005}) for i in range(200)]
            poll_until(
                lambda: count_completed(store, ids) == len(ids),
                timeout=90,
                what="200 instances on two SQLite runners",
                interval=0.2,
            )
            for proc in procs:
                kids.terminate(proc)

        assert_durable(store, ledger, ids)
        runs = ledger.runs()
        assert set(runs.values()) == {1}, "an action ran twice without any crash"
        drivers = _drivers(store, ids)
        assert all(d and d <= set(workers) for d in drivers.values())
        per_worker = Counter(w for d in drivers.values() for w in d)
        assert set(per_worker) == set(workers), f"work was not shared: {per_worker}"
    finally:
        ledger.close()
        store.close()


def _handed_back(sql: Any, instance_id: str, step: str) -> bool:
    """Whether every start of ``step`` but its last was handed back unrun: each such
    attempt has a STEP_RELEASED (the step's one STEP_COMPLETED is checked above)."""
    rows = sql.execute(
        "SELECT event_type, attempt FROM wf_events WHERE instance_id = %s AND node = %s"
        " AND event_type IN ('STEP_STARTED', 'STEP_RELEASED') ORDER BY seq",
        (instance_id, step),
    ).fetchall()
    started = [a for t, a in rows if t == "STEP_STARTED"]
    released = [a for t, a in rows if t == "STEP_RELEASED"]
    return released == started[:-1]


@pytest.mark.crash
@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("victim", [False, True], ids=["all_live", "one_sigkilled"])
def test_four_runner_processes_on_postgres_complete_1000_instances_once(
    pg_target: Target, victim: bool
) -> None:
    """With ``victim``, runner pg-0 SIGKILLs itself just before its 150th completion commit
    (a 2 s lease): the other three take its work over, and no step completes twice."""
    n = 1000
    store = pg_target.open_store()
    ledger = pg_target.open_ledger()
    sql = pg_target.open_sql()
    scalar = partial(sql_scalar, sql)

    try:
        workers = [f"pg-{k}" for k in range(4)]
        with Children(pg_target) as kids:
            lease = 2.0 if victim else 30.0
            procs = [
                kids.spawn(
                    w,
                    lease=lease,
                    concurrency=3,
                    kill="complete:before:150" if victim and w == "pg-0" else None,
                )
                for w in workers
            ]
            client = Client(store)
            ids = [client.start(Ledgered, {"n": i}) for i in range(n)]
            wait_completed(scalar, n, what=f"{n} instances on four Postgres runners")
            for proc in procs[1:] if victim else procs:
                kids.terminate(proc)
            if victim:
                assert procs[0].wait(timeout=5) == -signal.SIGKILL

        # Each step completed exactly once per instance, and started exactly once: no
        # runner ever claimed a step another runner was already running.
        # (With a victim, the steps it had in flight were started again by another runner.)
        for event_type in (Ev.STEP_COMPLETED,) if victim else (Ev.STEP_COMPLETED, Ev.STEP_STARTED):
            rows = sql.execute(
                "SELECT instance_id::text, node, count(*) FROM wf_events"
                " WHERE event_type = %s GROUP BY 1, 2",
                (str(event_type),),
            ).fetchall()
            assert len(rows) == n * len(STEPS), f"{event_type}: {len(rows)} (instance, step)"
            twice = [r for r in rows if r[2] != 1]
            if event_type == Ev.STEP_STARTED:
                # One exception, by design and logged: the test process starts every
                # instance, so each start is leased in its own commit to a runner with a
                # worker asleep (its first step's STEP_STARTED in that commit); when that
                # worker woke meanwhile and the runner's workers stay busy, the start is
                # handed back unrun after Offers.spare_wait, with a STEP_RELEASED, and
                # claimed again as the next attempt (docs/architecture.md, "A start
                # leased to a runner of another process"). Any other second start is a
                # double claim.
                twice = [r for r in twice if not _handed_back(sql, r[0], r[1])]
            assert not twice, f"{event_type} more than once: {twice[:5]}"
            assert {r[1] for r in rows} == set(STEPS)
        completed_events = "SELECT count(*) FROM wf_events WHERE event_type = 'WORKFLOW_COMPLETED'"
        assert scalar(completed_events) == n
        assert scalar("SELECT count(*) FROM wf_tasks") == 0

        # Every step event was written by one of the four runners, each did some work.
        by_worker = dict(
            sql.execute(
                "SELECT coalesce(worker, '<none>'), count(DISTINCT instance_id) FROM wf_events"
                " WHERE event_type IN ('STEP_STARTED', 'STEP_COMPLETED') GROUP BY 1"
            ).fetchall()
        )
        assert set(by_worker) == set(workers), f"instances per worker: {by_worker}"
        undriven = scalar(
            "SELECT count(*) FROM wf_instances i WHERE NOT EXISTS (SELECT 1 FROM wf_events e"
            " WHERE e.instance_id = i.id AND e.event_type = 'STEP_COMPLETED'"
            " AND e.worker = ANY(%s))",
            workers,
        )
        assert undriven == 0

        assert_durable(store, ledger, ids)  # verify() == {} and the ledger, per instance
        reruns = sum(c - 1 for c in ledger.runs().values())
        if victim:
            # The victim died holding 1 to 3 steps (one of them surely mid-completion);
            # other runners ran them again and completed them.
            assert 1 <= reruns <= 3, f"{reruns} reruns; the victim held 1 to 3 steps"
            taken_over = scalar(
                "SELECT count(*) FROM wf_events s JOIN wf_events c"
                " ON c.instance_id = s.instance_id AND c.node = s.node"
                " WHERE s.event_type = 'STEP_STARTED' AND s.worker = 'pg-0'"
                " AND c.event_type = 'STEP_COMPLETED' AND c.worker <> 'pg-0'"
            )
            assert taken_over >= 1
        else:
            assert reruns == 0, "an action ran twice without any crash"
        # No stall behind the scenes: nothing failed or timed out, and (with no victim,
        # whose 2 s lease a starved live runner could also miss) every instance was
        # driven by one runner from claim to end: none waited for a lease to run out.
        if not victim:
            drivers = _drivers(store, ids)
            handed_over = [i for i, d in drivers.items() if len(d) != 1]
            if handed_over:  # what happened to the first one, for the reader of the log
                first = [
                    (e.event_type, e.node, e.attempt, e.worker)
                    for e in store.events(handed_over[0])
                ]
                raise AssertionError(f"driven by several runners: {handed_over[:5]}; {first}")
        failed = "SELECT count(*) FROM wf_events WHERE event_type IN ('STEP_FAILED', 'QUARANTINED')"
        assert scalar(failed) == 0
    finally:
        sql.close()
        ledger.close()
        store.close()


@pytest.mark.crash
def test_sigterm_stops_gracefully_and_a_restart_finishes(target: Target) -> None:
    store = target.open_store()
    ledger = target.open_ledger()
    n = 10
    try:
        client = Client(store)
        ids = [client.start(Ledgered, {"n": i, "delay": 0.2}) for i in range(n)]
        with Children(target) as kids:
            first = kids.spawn("term-a", lease=30.0, concurrency=2)
            poll_until(
                lambda: (
                    sum(e.event_type == Ev.STEP_COMPLETED for i in ids for e in store.events(i))
                    >= 3
                ),
                timeout=30,
                what="three completed steps before SIGTERM",
            )
            kids.terminate(first, timeout=5.0)  # asserts exit status 0: a graceful stop
            assert count_completed(store, ids) < n, "everything finished before SIGTERM"

            # Graceful: the running steps finished and their successors were handed back,
            # so nothing is leased (the 30 s lease would otherwise block the restart) and
            # nothing is in doubt.
            left = [t for t in (store.task(i) for i in ids) if t is not None]
            assert left
            assert all(t.lease_owner is None and not t.in_flight for t in left), left

            second = kids.spawn("term-b", lease=30.0, concurrency=2)
            poll_until(
                lambda: count_completed(store, ids) == n,
                timeout=20,
                what="the restarted runner to finish",
            )
            kids.terminate(second)

        assert_durable(store, ledger, ids)
        runs = ledger.runs()
        assert set(runs.values()) == {1}, f"a step ran twice: {runs.most_common(3)}"
    finally:
        ledger.close()
        store.close()
