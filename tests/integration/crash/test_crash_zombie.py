"""A zombie runner: frozen (SIGSTOP) past its lease, thawed while its heir is mid-step.

Runner A freezes, heartbeat and all, after the first step's action returned and before
its completion commit. Its lease runs out; runner B takes the instance over, starts the
step again (in doubt) and is inside the action when A is thawed. A's stale completion
must be refused (the instance's version moved on), so the step completes once, B's
attempt is the one that counts, and the ledger still has one side effect per step.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from statemachine_wf.client.machine import Client
from statemachine_wf.core.store import Store

from .harness import Children, Target, assert_durable, count_completed, poll_until
from .workflows import Ledger, Ledgered


def _frozen(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


@pytest.fixture
def opened(target: Target) -> Iterator[tuple[Store, Ledger]]:
    store = target.open_store()
    ledger = target.open_ledger()
    yield store, ledger
    ledger.close()
    store.close()


@pytest.mark.crash
@pytest.mark.parametrize(
    "takeover",
    [
        "other_worker_id",
        "same_worker_id",
    ],
)
def test_thawed_zombie_cannot_complete_a_step_again(
    target: Target, opened: tuple[Store, Ledger], takeover: str
) -> None:
    store, ledger = opened
    instance = Client(store).start(Ledgered, {"n": 0, "delay": 1.5})

    with Children(target) as kids:
        zombie = kids.spawn("zombie", lease=1.0, concurrency=1, kill="complete:before:1:stop")
        poll_until(lambda: _frozen(zombie.pid), timeout=20, what="runner A to freeze")
        heir_id = "zombie" if takeover == "same_worker_id" else "heir"
        heir = kids.spawn(heir_id, lease=1.0, concurrency=1)
        poll_until(
            lambda: ledger.runs()[(instance, "first")] >= 2,
            timeout=20,
            what="runner B to be inside its rerun of the first step",
        )
        zombie.send_signal(signal.SIGCONT)
        poll_until(
            lambda: count_completed(store, [instance]) == 1,
            timeout=30,
            what="the instance to complete",
        )
        if takeover == "other_worker_id":
            log = target.log_dir / "zombie-0.log"
            poll_until(
                lambda: "taken over" in log.read_text(),
                timeout=20,
                what="the thawed runner to find its lease lost",
            )
        kids.terminate(heir)
        kids.terminate(zombie)

    assert_durable(store, ledger, [instance])
    completed = [e for e in store.events(instance) if e.event_type == "STEP_COMPLETED"]
    assert completed[0].attempt == 2, "the zombie's stale attempt 1 was completed"


@pytest.mark.crash
def test_lapsed_lease_retaken_by_the_same_runner_completes_the_step_once(
    target: Target, opened: tuple[Store, Ledger]
) -> None:
    """One runner, two threads, a unique worker id: heartbeats fail for 2.5 s, so the
    lease on the first step lapses while thread 1 is in its 1.5 s action, and thread 2
    claims the step again (in doubt). Thread 1's late completion must be refused."""
    store, ledger = opened
    instance = Client(store).start(Ledgered, {"n": 0, "delay": 1.5})

    with Children(target) as kids:
        runner = kids.spawn("lapsed", lease=0.5, concurrency=2, heartbeat_outage=2.5)
        poll_until(
            lambda: count_completed(store, [instance]) == 1,
            timeout=30,
            what="the instance to complete",
        )
        kids.terminate(runner)

    assert ledger.runs()[(instance, "first")] >= 2, "the lease never lapsed"
    assert_durable(store, ledger, [instance])
