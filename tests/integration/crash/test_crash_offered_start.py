"""A start leased to a runner of another process, under SIGKILL: the runner dies right
after it heard the start and handed it to its workers. The start's commit leased the task
to that runner and started its first step, and only its process was told: another
runner takes the task over once the lease runs out, in doubt as after any crash mid-step.
Nothing is lost, no step completes twice, and no start made after the kill is leased to
the dead process (its advisory lock went with its connection: docs/architecture.md, "A
start leased to a runner of another process")."""

from __future__ import annotations

import signal
import time

import pytest

from statemachine_wf.client.machine import Client

from .harness import Children, Target, assert_durable, opened, poll_until, wait_completed
from .workflows import STEPS, Ledgered


@pytest.mark.crash
@pytest.mark.postgres
@pytest.mark.slow
def test_a_runner_killed_right_after_hearing_a_start_leased_to_it_loses_nothing(
    pg_target: Target,
) -> None:
    with opened(pg_target) as o:
        store, ledger, sql, scalar = o.store, o.ledger, o.sql, o.scalar
        client = Client(store)  # this process runs no runner: its starts lease elsewhere
        with Children(pg_target) as kids:
            bystander = kids.spawn("offer-bystander", lease=2.0, concurrency=2)
            victim = kids.spawn("offer-victim", lease=2.0, concurrency=2, kill="offer:heard:3")
            poll_until(
                lambda: scalar("SELECT count(*) FROM wf_idle_runners WHERE sleeping > 0") == 2,
                timeout=30,
                what="both runners' workers asleep",
            )
            ids: list[str] = []
            while victim.poll() is None and len(ids) < 300:
                ids.append(client.start(Ledgered, {"n": len(ids)}))
                time.sleep(0.05)
            assert kids.wait_exit(victim, 30, "the victim's kill") == -signal.SIGKILL
            killed_at = len(ids)
            ids += [client.start(Ledgered, {"n": len(ids) + n}) for n in range(10)]
            wait_completed(scalar, len(ids), what=f"{len(ids)} instances after the kill")

            firsts: dict[str, list[tuple[str, int]]] = {}
            released: dict[str, list[tuple[str, int]]] = {}
            for iid in ids:
                rows = sql.execute(
                    "SELECT event_type, worker, attempt FROM wf_events WHERE instance_id = %s"
                    " AND event_type IN ('STEP_STARTED', 'STEP_RELEASED') AND node = %s"
                    " ORDER BY seq",
                    (iid, STEPS[0]),
                ).fetchall()
                firsts[iid] = [(w, a) for t, w, a in rows if t == "STEP_STARTED"]
                released[iid] = [(w, a) for t, w, a in rows if t == "STEP_RELEASED"]
            leased = [iid for iid in ids[:killed_at] if firsts[iid][0][0] == "offer-victim"]
            assert len(leased) >= 3, "fewer starts leased to the victim than it heard"
            taken_over = [iid for iid in leased if len(firsts[iid]) > 1]
            assert taken_over, "the start the victim heard last was not taken over"
            for iid in taken_over:
                # Started by the start's own commit for the victim, then taken over as
                # the next attempt once the lease ran out (in doubt, no STEP_RELEASED),
                # or, before the kill, handed back unrun (a STEP_RELEASED).
                assert firsts[iid] == [("offer-victim", 1), ("offer-bystander", 2)]
                assert released[iid] in ([], [("offer-victim", 1)])
            assert any(released[iid] == [] for iid in taken_over), "none was in doubt"
            for iid in ids[killed_at:]:
                # Once or twice: a start leased to the bystander while its workers were
                # busy is handed back unrun after Offers.spare_wait (a STEP_RELEASED) and
                # claimed again as the next attempt.
                assert {w for w, _ in firsts[iid]} == {"offer-bystander"}, (
                    "a start after the kill went to the dead runner"
                )
                assert released[iid] == firsts[iid][:-1]
            kids.terminate(bystander)

        # One STEP_COMPLETED a step, verify() == {} and the ledger, per instance.
        assert_durable(store, ledger, ids)
