"""A start kept in its process, under SIGKILL: the process that made it dies after the
commit and before the worker it counted on wakes. No other process was told of the
start (no NOTIFY), and the commit leased its task to the dying runner, its first step
started: another runner claims it once that lease runs out, in doubt as after any crash
mid-step; nothing is lost and no step runs twice (docs/architecture.md, "A start kept
in its process")."""

from __future__ import annotations

import signal

import pytest

from statemachine_wf.core.store import Store
from statemachine_wf.definition.events import Ev

from .harness import (
    Children,
    Target,
    assert_durable,
    count_completed,
    opened,
    poll_until,
    wait_completed,
)
from .workflows import STEPS


@pytest.mark.crash
@pytest.mark.postgres
@pytest.mark.slow
def test_a_producer_killed_right_after_a_kept_start_loses_nothing(pg_target: Target) -> None:
    with opened(pg_target) as o:
        store, ledger, sql, scalar = o.store, o.ledger, o.sql, o.scalar
        with Children(pg_target) as kids:
            bystander = kids.spawn("kept-bystander", lease=2.0, concurrency=2)
            # Starts its own instances, one every 20 ms, its two workers mostly idle:
            # it dies right after the commit of the third start it leased to one of them
            # (a start is leased only when a worker sleeps and no claim is under way in
            # the process: on a slow box one in five of them).
            victim = kids.spawn(
                "kept-victim", lease=2.0, concurrency=2, produce=100, kill="start:kept:3"
            )
            assert kids.wait_exit(victim, 90, "the victim's kill") == -signal.SIGKILL
            made = scalar("SELECT count(*) FROM wf_instances")
            assert 3 <= made < 100  # the third leased start committed; the producer stopped
            # The last one made is the one the victim kept: nobody ran it before the kill.
            last = scalar("SELECT id::text FROM wf_instances ORDER BY created_at DESC LIMIT 1")
            wait_completed(scalar, made, what=f"{made} instances after the victim's kill")
            ran_last = scalar(
                "SELECT count(DISTINCT worker) FROM wf_events WHERE instance_id = %s"
                " AND event_type = 'STEP_STARTED' AND worker = 'kept-bystander'",
                last,
            )
            assert ran_last == 1, "the kept start was not run by the other runner"
            first = sql.execute(
                "SELECT worker, attempt FROM wf_events WHERE instance_id = %s"
                " AND event_type = 'STEP_STARTED' AND node = %s ORDER BY seq",
                (last, STEPS[0]),
            ).fetchall()
            # Started by the start's own commit, for the victim; taken over once its
            # lease ran out, as the next attempt.
            assert first == [("kept-victim", 1), ("kept-bystander", 2)]
            kids.terminate(bystander)

        ids = [r[0] for r in sql.execute("SELECT id::text FROM wf_instances").fetchall()]
        rows = sql.execute(
            "SELECT instance_id::text, node, count(*) FROM wf_events"
            " WHERE event_type = 'STEP_COMPLETED' GROUP BY 1, 2"
        ).fetchall()
        assert len(rows) == len(ids) * len(STEPS)
        assert not [r for r in rows if r[2] != 1], "a step completed twice"
        assert_durable(store, ledger, ids)  # verify() == {} and the ledger, per instance


@pytest.mark.crash
@pytest.mark.slow
def test_a_producer_killed_right_after_a_kept_start_loses_nothing_on_sqlite(
    sqlite_target: Target,
) -> None:
    """The same kill on SQLite, whose start leases its task in its own commit too; read
    through the store (the other process is the bystander runner on the same file)."""
    store = sqlite_target.open_store()
    ledger = sqlite_target.open_ledger()
    try:
        with Children(sqlite_target) as kids:
            bystander = kids.spawn("kept-bystander", lease=2.0, concurrency=2)
            victim = kids.spawn(
                "kept-victim", lease=2.0, concurrency=2, produce=100, kill="start:kept:3"
            )
            assert kids.wait_exit(victim, 90, "the victim's kill") == -signal.SIGKILL
            made = store.count_instances()
            assert 3 <= made < 100
            ids = [r.id for r in store.list_instances(limit=made)]
            poll_until(
                lambda: count_completed(store, ids) == made,
                timeout=120,
                what=f"{made} instances after the victim's kill",
                interval=0.25,
            )
            # The kept starts: their first STEP_STARTED is the victim's, in the start's
            # own commit (the attempt 1 next to WORKFLOW_CREATED). The third one, the
            # last the victim made, was taken over once its lease ran out.
            firsts = {iid: _first_step_starts(store, iid) for iid in ids}
            kept = [iid for iid, starts in firsts.items() if starts[0][0] == "kept-victim"]
            assert kept, "no start was leased to the victim's own workers"
            taken_over = [iid for iid in kept if len(firsts[iid]) > 1]
            assert taken_over, "the start kept for the killed worker was not taken over"
            for iid in taken_over:
                assert firsts[iid] == [("kept-victim", 1), ("kept-bystander", 2)]
            kids.terminate(bystander)
        assert_durable(store, ledger, ids)  # one STEP_COMPLETED per step, verify() == {}
    finally:
        ledger.close()
        store.close()


def _first_step_starts(store: Store, instance_id: str) -> list[tuple[str | None, int | None]]:
    return [
        (e.worker, e.attempt)
        for e in store.events(instance_id)
        if e.event_type == Ev.STEP_STARTED and e.node == STEPS[0]
    ]
