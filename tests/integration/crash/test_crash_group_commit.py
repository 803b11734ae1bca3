"""PostgreSQL group commit under SIGKILL: a runner of eight threads, whose decisions share
statements, killed in the middle of a run loses nothing and completes nothing twice.

A statement is one transaction: the decisions it carries commit together or not at all,
and a thread whose decision did not commit is, after the kill, a step in doubt like any
other. The decisions of several instances that one statement committed share its
``now()``, which is how the test sees that the victim did group them.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import pytest

from statemachine_wf.client.machine import Client

from .harness import Children, Target, assert_durable, opened, wait_completed
from .workflows import STEPS, Ledgered


@pytest.mark.crash
@pytest.mark.postgres
@pytest.mark.slow
def test_a_runner_killed_with_grouped_statements_in_flight_loses_nothing(
    pg_target: Target,
) -> None:
    n, threads = 300, 8
    with opened(pg_target) as o:
        store, ledger, sql, scalar = o.store, o.ledger, o.sql, o.scalar
        with Children(pg_target) as kids:
            victim = kids.spawn(
                "grp-victim", lease=2.0, concurrency=threads, kill="complete:before:150"
            )
            client = Client(store)
            ids = [client.start(Ledgered, {"n": i}) for i in range(n)]
            assert kids.wait_exit(victim, 90, "the victim's kill") == -signal.SIGKILL

            # Several instances' completions in one statement: one transaction's now().
            assert _grouped(scalar, "grp-victim") > 0, "the victim never grouped a statement"

            heir = kids.spawn("grp-heir", lease=2.0, concurrency=threads)
            wait_completed(scalar, n, what=f"{n} instances after the victim's kill")
            kids.terminate(heir)

        rows = sql.execute(
            "SELECT instance_id::text, node, count(*) FROM wf_events"
            " WHERE event_type = 'STEP_COMPLETED' GROUP BY 1, 2"
        ).fetchall()
        assert len(rows) == n * len(STEPS)
        assert not [r for r in rows if r[2] != 1], "a step completed twice"
        assert_durable(store, ledger, ids)  # verify() == {} and the ledger, per instance
        # Only the steps the victim held when it died ran again: at most one a thread.
        reruns = sum(c - 1 for c in ledger.runs().values())
        assert 1 <= reruns <= threads, f"{reruns} reruns; the victim held 1 to {threads} steps"


@pytest.mark.postgres
@pytest.mark.slow
def test_heartbeats_and_group_commits_never_deadlock(pg_target: Target) -> None:
    # The whole runner, end to end (tests/integration/core/test_heartbeat_locks.py pins the
    # statement): a heartbeat and a group commit that waited for each other's task rows
    # deadlocked, and the aborted group handed all its steps back to be run again. With a
    # lease of 0.15 s the heartbeat beats every 0.05 s; before the fix this run saw 2 to 5
    # deadlocks in about one run of two (the orders of the rows must differ to meet).
    n, threads = 1500, 8
    with opened(pg_target) as o:
        store, ledger, scalar = o.store, o.ledger, o.scalar
        with Children(pg_target) as kids:
            runner = kids.spawn("beats", lease=0.15, concurrency=threads)
            client = Client(store)
            ids = [client.start(Ledgered, {"n": i}) for i in range(n)]
            wait_completed(scalar, n, what=f"{n} instances")
            assert _grouped(scalar, "beats") > 0, "the runner never grouped a statement"
            kids.terminate(runner)
            log = kids.log_tail(runner, lines=1_000_000)
        assert "deadlock" not in log.lower(), log
        assert "handing it back" not in log, log
        assert_durable(store, ledger, ids)


def _grouped(scalar: Callable[..., Any], worker: str) -> int:
    """How many of ``worker``'s transactions completed steps of several instances: the
    decisions one statement committed share its ``now()``."""
    return int(
        scalar(
            "SELECT count(*) FROM (SELECT created_at FROM wf_events"
            " WHERE worker = %s AND event_type = 'STEP_COMPLETED'"
            " GROUP BY created_at HAVING count(DISTINCT instance_id) > 1) AS g",
            worker,
        )
    )
