"""SIGKILL a runner process at each point of the step protocol, restart, and count.

For every kill point and both stores: start N instances of the three-step ledgered
workflow, run a runner child that kills itself at that point, check that it really died
there (exit by SIGKILL with work left), restart a runner and wait for everything to
complete, then assert the durability verdict (:func:`harness.assert_durable`): all
COMPLETED, the log complete and without a step completed twice, the row equal to the fold
of the log, and the external ledger counting exactly N side effects per step.

Two ways back: a new runner that waits out the dead runner's short lease
(``lease_expiry``), and a runner with the dead one's stable ``worker_id`` that takes its
own leases back at once (``same_worker``, with a 30 s lease it must not wait for).
"""

from __future__ import annotations

import random
import signal
import subprocess
from collections.abc import Iterator
from typing import TypedDict

import pytest

from statemachine_wf.client.machine import Client
from statemachine_wf.core.store import Store

from .harness import Children, Target, assert_durable, count_completed, poll_until
from .workflows import Ledger, Ledgered

N = 12


class KillAt(TypedDict, total=False):
    """Where a runner child kills itself: its ``--kill`` or its ``--chaos``."""

    kill: str
    chaos: str


# (name, --kill or --chaos, whether the killed thread's own step must run again)
KILL_POINTS: list[tuple[str, KillAt, bool]] = [
    ("before_claim", {"kill": "claim:before:4"}, False),
    ("after_claim", {"kill": "claim:after:3"}, False),
    ("mid_action_after_save", {"chaos": "after_save:4"}, True),
    ("mid_action_after_effect", {"chaos": "after_effect:5"}, True),
    ("before_completion_commit", {"kill": "complete:before:6"}, True),
    ("after_completion_commit", {"kill": "complete:after:4"}, False),
    ("after_last_completion_commit", {"kill": "complete:after:5"}, False),
]

RESTARTS = {
    # restart mode: (lease of both runners, worker id of the restarted runner)
    "lease_expiry": (1.0, "crash-b"),
    "same_worker": (30.0, "crash-a"),
}


@pytest.fixture
def opened(target: Target) -> Iterator[tuple[Store, Ledger]]:
    store = target.open_store()
    ledger = target.open_ledger()
    yield store, ledger
    ledger.close()
    store.close()


@pytest.mark.crash
@pytest.mark.parametrize("restart", sorted(RESTARTS))
@pytest.mark.parametrize(
    ("point", "how", "reruns"), KILL_POINTS, ids=[name for name, _, _ in KILL_POINTS]
)
def test_sigkill_then_restart_completes_each_step_once(
    target: Target,
    opened: tuple[Store, Ledger],
    point: str,
    how: KillAt,
    reruns: bool,
    restart: str,
) -> None:
    store, ledger = opened
    client = Client(store)
    ids = [client.start(Ledgered, {"n": i, "delay": 0.01}) for i in range(N)]
    lease, second_id = RESTARTS[restart]

    with Children(target) as kids:
        doomed = kids.spawn("crash-a", lease=lease, **how)
        code = kids.wait_exit(doomed, 60, f"kill point {point}")
        assert code == -signal.SIGKILL, (
            f"runner exited with {code}, not by SIGKILL at {point}\n{kids.log_tail(doomed)}"
        )
        assert count_completed(store, ids) < N, "nothing was left to recover"

        survivor = kids.spawn(second_id, lease=lease)
        # Under 30 s: the same_worker restart must not wait for its own old leases.
        poll_until(
            lambda: count_completed(store, ids) == N,
            timeout=20,
            what=f"all {N} instances to complete after restart ({restart})",
        )
        kids.terminate(survivor)

    assert_durable(store, ledger, ids)
    runs = ledger.runs()
    if reruns:
        # The killed step ran again, and the ledger still counted its effect once.
        assert max(runs.values()) >= 2, f"no step ran twice after dying at {point}"


@pytest.mark.crash
def test_repeated_crashes_during_recovery_still_complete_each_step_once(
    target: Target, opened: tuple[Store, Ledger]
) -> None:
    """Kill runner after runner early (k of 1 to 3), most of them while recovering the
    previous one's in-doubt steps; the same stable worker id takes its leases back each
    time. Then one runner finishes the work."""
    store, ledger = opened
    client = Client(store)
    ids = [client.start(Ledgered, {"n": i, "delay": 0.01}) for i in range(N)]
    rng = random.Random(7)
    points = ["claim:before", "claim:after", "complete:before", "complete:after"]
    killed: list[str] = []

    with Children(target) as kids:
        for _ in range(8):
            point = rng.choice([*points, "after_save", "after_effect"])
            spec = f"{point}:{rng.randint(1, 3)}"
            how: KillAt = {"kill": spec} if point in points else {"chaos": spec}
            proc = kids.spawn("storm", lease=30.0, **how)

            def died_or_done(p: subprocess.Popen[bytes] = proc) -> bool:
                return p.poll() is not None or count_completed(store, ids) == N

            poll_until(
                died_or_done,
                timeout=20,
                what=f"the runner to die at {spec} or finish",
            )
            if proc.poll() is None:  # everything completed before the kill point
                kids.terminate(proc)
                break
            assert proc.returncode == -signal.SIGKILL, kids.log_tail(proc)
            killed.append(spec)
        if count_completed(store, ids) < N:
            last = kids.spawn("storm", lease=30.0)
            poll_until(
                lambda: count_completed(store, ids) == N, timeout=20, what="the final runner"
            )
            kids.terminate(last)

    assert len(killed) >= 4, f"only {killed} hit before the work ran out"
    assert_durable(store, ledger, ids)
