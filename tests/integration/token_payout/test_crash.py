"""SIGKILL a TokenPayout runner at every boundary of a payout, restart, count the tokens.

On each store, for each boundary (before/after the transaction record's save, before/after the
broadcast, before/after the confirmation's commit): four payouts from one treasury, a
runner process that kills itself the first time it gets there, a runner with the same
worker id that finishes the work. Then: every payout COMPLETED, each payout id paid
exactly once (one ``Paid`` event, the recipient holding exactly its amount), the
treasury down by exactly the total, and one treasury nonce per payout with no gap (no
extra transaction, reverted or not, was ever sent).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from examples.token_payout import TokenPayout
from statemachine_wf import Status
from tests.integration.chain.conftest import wait_for
from tests.integration.chain.procs import Workers

from .conftest import PayEnv, payout_input
from .worker_main import POINTS

pytestmark = [pytest.mark.chain, pytest.mark.crash]

WORKER = Path(__file__).with_name("worker_main.py")
N = 4


def assert_died_at(env: PayEnv, ids: list[str], start: int, point: str) -> None:
    """The runner died where it was told: what was recorded, sent and committed then."""
    recorded = sum(1 for i in ids if env.client.get(i).progress.get("tx_1"))
    completed = sum(1 for i in ids if env.client.status(i) == Status.COMPLETED)
    sent = env.eth.nonce(env.treasury.address, "pending") - start
    want = {  # (records saved, transactions the node has, payouts completed)
        "before_save": (0, 0, 0),
        "after_save": (1, 0, 0),
        "before_broadcast": (1, 0, 0),
        "after_broadcast": (1, 1, 0),
        "before_confirm_commit": (1, 1, 0),
        "after_confirm_commit": (1, 1, 1),
    }[point]
    assert (recorded, sent, completed) == want, point


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_each_boundary_pays_each_recipient_once(
    any_pay_env: PayEnv, tmp_path: Path, point: str
) -> None:
    env = any_pay_env
    start = env.eth.nonce(env.treasury.address)
    ids = [env.client.start(TokenPayout, payout_input(n, tag=point)) for n in range(N)]
    common = [*env.store_args(), "--rpc", env.node.url, "--token", env.token.address]

    def all_completed() -> bool:
        return all(env.client.status(i) == Status.COMPLETED for i in ids)

    with Workers(tmp_path, common, env.node.private_keys[0], script=WORKER) as workers:
        doomed = workers.spawn("w1", "--chaos", point)
        try:
            code = doomed.wait(timeout=90)
        except Exception:
            raise AssertionError(f"{point} never reached:\n{workers.tail(doomed)}") from None
        assert code == -signal.SIGKILL, workers.tail(doomed)
        assert not all_completed(), "nothing was left to recover"
        assert_died_at(env, ids, start, point)
        survivor = workers.spawn("w1")  # same worker id: its dead leases are due at once
        wait_for(all_completed, timeout=90, what=f"all {N} payouts completed after {point}")
        workers.stop(survivor)

    env.assert_paid_once(ids, start)
    reconciled = [e for i in ids for e in env.client.history(i) if e.event_type == "RECONCILED"]
    assert reconciled, "the restarted runner reconciled the step in doubt"
