"""ScoreSubmission and CloseEpoch off the straight path, on anvil + arlocal.

The rows of seed 002's failure table that apply to them (they have no upload step):

==========================  ===========================================  ==================
workflow                    failure                                      behaviour
==========================  ===========================================  ==================
ScoreSubmission             revert "unknown work" (work not in yet)      STALLED, then
                                                                         COMPLETED when it is
ScoreSubmission             revert "epoch closed"                        FAILED, nothing sent
ScoreSubmission             tx not found after timeout (dropped)         the same bytes again
ScoreSubmission             nonce too low (another path used it)         retry, fresh nonce
CloseEpoch                  its mined tx reverts "epoch closed" (closed  COMPLETED: on-chain
                            by somebody else first, same block)          wins
CloseEpoch                  tx pending                                   keep polling
==========================  ===========================================  ==================
"""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_wf import Status
from statemachine_wf.adapters.ethereum import LocalSigner

from .conftest import Env, rpc, wait_for
from .flows import STUDIO, QuickClose, QuickScore, settings, work_input
from .test_failure_table import Interloper, failures

pytestmark = pytest.mark.chain


def score_input(signer: LocalSigner, data_hash: str, *, epoch: int = 1) -> dict[str, Any]:
    return {
        "studio_address": STUDIO,
        "epoch": epoch,
        "signer_address": signer.address,
        "data_hash": data_hash,
        "score": 42,
    }


def submit_work_directly(env: Env, signer: LocalSigner, data_hash: str, *, epoch: int = 1) -> None:
    tx = env.eth.build_call(
        env.contract,
        "submitWork",
        STUDIO,
        epoch,
        bytes.fromhex(data_hash[2:]),
        "ar://elsewhere",
        sender=signer.address,
    )
    env.eth.wait(env.eth.send_raw(signer.sign_transaction(tx)))


def score_of(env: Env, data_hash: str, scorer: LocalSigner, *, epoch: int = 1) -> int:
    fn = env.contract.functions.scoreOf(STUDIO, epoch, bytes.fromhex(data_hash[2:]), scorer.address)
    return int(fn.call())


def test_a_score_for_unknown_work_stalls_then_completes_when_the_work_lands(
    chain_env: Env,
) -> None:
    env = chain_env
    scorer, worker = env.signers[1], env.signers[0]
    data_hash = work_input(40, worker.address)["data_hash"]
    nonce = env.eth.nonce(scorer.address)
    s = env.client.start(QuickScore, score_input(scorer, data_hash))
    soon = settings(env.contract.address, stall_retry=0.5)
    with env.background(chaoschain=soon):
        wait_for(lambda: env.status(s) == Status.STALLED, timeout=30, what="the stall")
        record = env.client.get(s)
        assert record.error is not None
        assert record.error["code"] == "unknown_work"
        assert record.progress.get("tx_1") is None  # refused at estimation: nothing sent
        assert env.eth.nonce(scorer.address) == nonce
        submit_work_directly(env, worker, data_hash)
        wait_for(lambda: env.status(s) == Status.COMPLETED, timeout=30, what="completion")
    assert score_of(env, data_hash, scorer) == 42
    progress = env.progress(s)
    assert progress["onchain_tx_hash"] == progress["tx_1"]["tx_hash"]
    assert env.eth.nonce(scorer.address) == nonce + 1
    assert [f[2] for f in failures(env, s)] == ["unknown_work"]


def test_a_score_in_a_closed_epoch_fails_without_sending(chain_env: Env) -> None:
    env = chain_env
    scorer, worker = env.signers[1], env.signers[0]
    data_hash = work_input(41, worker.address, epoch=7)["data_hash"]
    submit_work_directly(env, worker, data_hash, epoch=7)
    close = env.eth.build_call(env.contract, "closeEpoch", STUDIO, 7, sender=worker.address)
    env.eth.wait(env.eth.send_raw(worker.sign_transaction(close)))
    nonce = env.eth.nonce(scorer.address)
    s = env.client.start(QuickScore, score_input(scorer, data_hash, epoch=7))
    env.run()
    record = env.client.get(s)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error["code"] == "epoch_closed"
    assert record.error["recoverable"] is False
    assert env.eth.nonce(scorer.address) == nonce
    assert env.client.signers() == []  # the slot went with the instance


@pytest.mark.usefixtures("manual_mining")
def test_a_dropped_score_is_broadcast_again_from_its_record(chain_env: Env) -> None:
    env = chain_env
    scorer, worker = env.signers[1], env.signers[0]
    data_hash = work_input(42, worker.address)["data_hash"]
    env.eth.send_raw(
        worker.sign_transaction(
            env.eth.build_call(
                env.contract,
                "submitWork",
                STUDIO,
                1,
                bytes.fromhex(data_hash[2:]),
                "ar://elsewhere",
                sender=worker.address,
            )
        )
    )
    rpc(env.eth, "evm_mine")
    s = env.client.start(QuickScore, score_input(scorer, data_hash))
    with env.background():
        wait_for(lambda: env.progress(s).get("tx_1"), timeout=30, what="tx recorded")
        tx_hash = env.progress(s)["tx_1"]["tx_hash"]
        wait_for(lambda: env.eth.is_pending(tx_hash), timeout=10, what="tx pooled")
        rpc(env.eth, "anvil_dropTransaction", tx_hash)
        wait_for(lambda: env.progress(s).get("resent_1"), timeout=20, what="re-broadcast")
        wait_for(lambda: env.eth.is_pending(tx_hash), timeout=10, what="the same tx pooled")
        rpc(env.eth, "evm_mine")
        wait_for(lambda: env.status(s) == Status.COMPLETED, timeout=20, what="completion")
    progress = env.progress(s)
    assert progress["onchain_tx_hash"] == tx_hash
    assert progress.get("tx_2") is None
    assert score_of(env, data_hash, scorer) == 42
    assert env.transitions(s) == [
        "SUBMIT_ONCHAIN->AWAIT_TX_CONFIRM",
        "AWAIT_TX_CONFIRM->SUBMIT_ONCHAIN",
        "SUBMIT_ONCHAIN->AWAIT_TX_CONFIRM",
        "AWAIT_TX_CONFIRM->COMPLETED",
    ]


def test_a_score_whose_nonce_is_taken_retries_with_a_fresh_one(chain_env: Env) -> None:
    env = chain_env
    scorer, worker = env.signers[1], env.signers[0]
    data_hash = work_input(43, worker.address)["data_hash"]
    submit_work_directly(env, worker, data_hash)
    start = env.eth.nonce(scorer.address)
    s = env.client.start(QuickScore, score_input(scorer, data_hash))
    env.run(eth=Interloper(env.eth, scorer))
    assert env.status(s) == Status.COMPLETED
    progress = env.progress(s)
    assert score_of(env, data_hash, scorer) == 42
    assert env.eth.nonce(scorer.address) == start + 2  # the interloper's, then ours
    mined = [progress[f"tx_{n}"] for n in (1, 2) if progress.get(f"tx_{n}")]
    assert progress["onchain_tx_hash"] == mined[-1]["tx_hash"]
    assert mined[-1]["nonce"] == start + 1
    assert "NonceTooLow" in [f[2] for f in failures(env, s)]


@pytest.mark.usefixtures("manual_mining")
def test_a_close_beaten_in_the_same_block_reverts_and_completes_on_chain_truth(
    chain_env: Env,
) -> None:
    env = chain_env
    closer, rival = env.signers[0], env.signers[2]
    c = env.client.start(
        QuickClose, {"studio_address": STUDIO, "epoch": 3, "signer_address": closer.address}
    )
    with env.background():
        wait_for(lambda: env.progress(c).get("tx_1"), timeout=30, what="tx recorded")
        ours = env.progress(c)["tx_1"]
        wait_for(lambda: env.eth.is_pending(ours["tx_hash"]), timeout=10, what="tx pooled")

        def pending_checks() -> int:
            return sum(
                1
                for e in env.client.history(c)
                if e.event_type == "STEP_WAITING" and "pending" in e.payload.get("reason", "")
            )

        wait_for(lambda: pending_checks() >= 3, timeout=20, what="pending checks")
        assert env.status(c) == Status.RUNNING
        # The rival pays a higher tip: first in the block; ours then reverts.
        rival_tx = env.eth.build_call(env.contract, "closeEpoch", STUDIO, 3, sender=rival.address)
        rival_tx.update(
            maxFeePerGas=2 * ours["max_fee_per_gas"],
            maxPriorityFeePerGas=2 * ours["max_priority_fee_per_gas"],
        )
        rival_hash = env.eth.send_raw(rival.sign_transaction(rival_tx))
        rpc(env.eth, "evm_mine")
        wait_for(lambda: env.status(c) == Status.COMPLETED, timeout=20, what="completion")
    assert env.eth.receipt_status(rival_hash).kind == "confirmed"
    status = env.eth.receipt_status(ours["tx_hash"])
    assert (status.kind, status.revert_reason) == ("reverted", "epoch closed")
    progress = env.progress(c)
    assert progress["already_on_chain"] is True
    assert progress.get("onchain_confirmed") is None
    assert progress.get("tx_2") is None  # never sent again
    assert failures(env, c) == []
    assert env.contract.functions.epochClosed(STUDIO, 3).call()
    assert env.client.signers() == []
