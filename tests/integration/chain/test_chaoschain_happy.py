"""ChaosChain end to end on anvil + arlocal: the straight path of each workflow."""

from __future__ import annotations

import pytest

from statemachine_wf import Status

from .conftest import Env
from .flows import STUDIO, QuickClose, QuickScore, QuickWork, work_input

pytestmark = pytest.mark.chain


def test_work_score_close_straight_path(chain_env: Env) -> None:
    env = chain_env
    signer, scorer = env.signers[0], env.signers[1]
    inp = work_input(1, signer.address)
    work = env.client.start(QuickWork, inp, idempotency_key="work-1")
    score = env.client.start(
        QuickScore,
        {
            "studio_address": STUDIO,
            "epoch": 1,
            "signer_address": scorer.address,
            "data_hash": inp["data_hash"],
            "score": 87,
        },
    )
    env.run(timeout=60)
    # The score may have met "unknown work" first (STALLED): resume it now the work is in.
    if env.status(score) == Status.STALLED:
        env.client.resume(score)
        env.run(timeout=30)
    close = env.client.start(
        QuickClose, {"studio_address": STUDIO, "epoch": 1, "signer_address": signer.address}
    )
    env.run(timeout=30)
    for instance_id in (work, score, close):
        assert env.status(instance_id) == Status.COMPLETED, env.events(instance_id)
        assert env.client.verify(instance_id) == {}
    assert env.transitions(work) == [
        "UPLOAD_EVIDENCE->SUBMIT_ONCHAIN",
        "SUBMIT_ONCHAIN->AWAIT_TX_CONFIRM",
        "AWAIT_TX_CONFIRM->COMPLETED",
    ]
    progress = env.client.get(work).progress
    assert progress["onchain_confirmed"] is True
    assert progress["onchain_tx_hash"] == progress["tx_1"]["tx_hash"]
    tx_id = progress["arweave_tx_id"]
    env.arlocal.mine()
    assert env.arweave.get_data(tx_id) == inp["evidence"].encode()
    (event,) = env.work_events()
    assert event.args.evidenceId == f"ar://{tx_id}"
    assert event.args.submitter == signer.address
    assert (
        env.contract.functions.scoreOf(
            STUDIO, 1, bytes.fromhex(inp["data_hash"][2:]), scorer.address
        ).call()
        == 87
    )
    assert env.contract.functions.epochClosed(STUDIO, 1).call()
    assert env.store.lock_holder(f"eth:31337:{signer.address.lower()}") is None
