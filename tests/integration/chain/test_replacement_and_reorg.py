"""The queue's paths off the straight line, on a real anvil (issue 11, item 6).

* a fee bump under a raised base fee (mining paused): the stuck transaction is replaced,
  priced on the block it would go in; exactly one of the recorded hashes is mined, and
  the workflow follows the one that was (the replacement, or the original when that is
  the one a node mines);
* a transaction evicted by a base-fee rise: lost, its bytes refused, it is replaced at the
  market price instead of being re-sent until the bound;
* a node that keeps dropping the transaction: re-broadcast up to ``max_rebroadcasts``
  times, then STALLED ``tx_dropped`` with the signer's slot shown by ``Client.signers``;
* a reorganisation before the confirmation depth whose new blocks carry something else:
  another transaction at our nonce (ours is superseded and signed anew), or the same
  work sent by somebody else (on-chain wins: nothing of ours is mined).
"""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_wf import Status
from statemachine_wf.adapters.ethereum import LocalSigner

from .conftest import Env, rpc, wait_for
from .flows import STUDIO, QuickWork, settings, work_input

pytestmark = pytest.mark.chain


def records(progress: dict[str, Any]) -> list[dict[str, Any]]:
    """The recorded transactions tx_1, tx_2, ... in order."""
    out = []
    for n in range(1, 11):
        record = progress.get(f"tx_{n}")
        if record is None:
            break
        out.append(record)
    return out


def base_fee(env: Env) -> int:
    return int(env.eth.w3.eth.get_block("latest")["baseFeePerGas"])


def seen_mined(env: Env, instance_id: str) -> bool:
    return any(
        "mined in" in e.payload.get("reason", "")
        for e in env.client.history(instance_id)
        if e.event_type == "STEP_WAITING"
    )


def _one_hash_mined(env: Env, w: str, sent: list[dict[str, Any]], mined: dict[str, Any]) -> None:
    """Exactly one of ``sent`` is mined, ``mined``, and the workflow says so."""
    kinds = {r["tx_hash"]: env.eth.receipt_status(r["tx_hash"]).kind for r in sent}
    assert [h for h, kind in kinds.items() if kind == "confirmed"] == [mined["tx_hash"]]
    assert set(kinds.values()) == {"confirmed", "not_found"}
    progress = env.progress(w)
    assert progress["onchain_tx_hash"] == mined["tx_hash"]
    assert progress["onchain_confirmed"] is True
    assert records(progress) == sent  # nothing signed after the winner was mined
    assert env.eth.nonce(env.signer.address) == sent[0]["nonce"] + 1
    assert len(env.work_events()) == 1
    assert env.store.lock_holder(f"eth:31337:{env.signer.address.lower()}") is None


@pytest.mark.usefixtures("manual_mining")
@pytest.mark.parametrize("winner", ["replacement", "original"])
def test_a_fee_bump_under_a_raised_base_fee_one_hash_mines_and_is_followed(
    chain_env: Env, winner: str
) -> None:
    env = chain_env
    quick_bump = settings(env.contract.address, stuck_after=1.0)
    w = env.client.start(QuickWork, work_input(30, env.signer.address))
    with env.background(chaoschain=quick_bump):
        wait_for(lambda: env.progress(w).get("tx_1"), timeout=30, what="tx recorded")
        first = env.progress(w)["tx_1"]
        wait_for(lambda: env.eth.is_pending(first["tx_hash"]), timeout=10, what="tx pooled")
        # Mining paused, the next block's base fee raised far above tx_1's fee cap.
        raised = 4 * first["max_fee_per_gas"]
        rpc(env.eth, "anvil_setNextBlockBaseFeePerGas", hex(raised))
        wait_for(lambda: env.progress(w).get("tx_2"), timeout=20, what="the stuck tx replaced")
        wait_for(
            lambda: env.eth.is_pending(env.progress(w)["tx_2"]["tx_hash"]),
            timeout=10,
            what="the replacement pooled",
        )
    # The runner is stopped: nothing is replaced again while the test picks the winner.
    sent = records(env.progress(w))
    replacement = sent[-1]
    assert env.eth.is_pending(replacement["tx_hash"])
    assert replacement["max_fee_per_gas"] > raised  # priced on the block it would go in
    assert {r["nonce"] for r in sent} == {first["nonce"]}  # replacements, never a new nonce
    assert env.eth.receipt_status(first["tx_hash"]).kind == "not_found"  # replaced
    if winner == "original":
        # Another node still had the original; the market fell back, and it is mined.
        rpc(env.eth, "anvil_dropTransaction", replacement["tx_hash"])
        rpc(env.eth, "anvil_setNextBlockBaseFeePerGas", hex(first["max_fee_per_gas"] // 2))
        env.eth.send_raw(first["raw_hex"])
        mined = first
    else:
        mined = replacement
    rpc(env.eth, "evm_mine")
    with env.background(chaoschain=quick_bump):
        wait_for(lambda: env.status(w) == Status.COMPLETED, timeout=20, what="completion")
    _one_hash_mined(env, w, sent, mined)
    # Followed where it was mined, never submitted again. The last move is the await
    # step's or the start-up reconcile's (the first runner may have stopped mid-step,
    # leaving it in doubt): either way it is the same move.
    moves = [t.removeprefix("reconcile:") for t in env.transitions(w)]
    assert moves == [
        "UPLOAD_EVIDENCE->SUBMIT_ONCHAIN",
        "SUBMIT_ONCHAIN->AWAIT_TX_CONFIRM",
        "AWAIT_TX_CONFIRM->COMPLETED",
    ]


@pytest.mark.usefixtures("manual_mining")
def test_a_tx_evicted_by_a_base_fee_rise_is_replaced_not_resent(chain_env: Env) -> None:
    env = chain_env
    w = env.client.start(QuickWork, work_input(34, env.signer.address))  # no stuck bumps
    with env.background():
        wait_for(lambda: env.progress(w).get("tx_1"), timeout=30, what="tx recorded")
        first = env.progress(w)["tx_1"]
        wait_for(lambda: env.eth.is_pending(first["tx_hash"]), timeout=10, what="tx pooled")
        # A block whose base fee is above tx_1's fee cap: anvil evicts tx_1 from its pool.
        rpc(env.eth, "anvil_setNextBlockBaseFeePerGas", hex(4 * first["max_fee_per_gas"]))
        rpc(env.eth, "evm_mine")
        raised = base_fee(env)
        assert raised > first["max_fee_per_gas"]
        # Lost; its bytes are refused (fee cap below the base fee): replaced, same nonce.
        wait_for(lambda: env.progress(w).get("tx_2"), timeout=20, what="a replacement")
        replacement = env.progress(w)["tx_2"]
        wait_for(lambda: env.eth.is_pending(replacement["tx_hash"]), timeout=10, what="pooled")
        rpc(env.eth, "evm_mine")
        wait_for(lambda: env.status(w) == Status.COMPLETED, timeout=20, what="completion")
    assert replacement["nonce"] == first["nonce"]
    assert replacement["max_fee_per_gas"] > raised
    _one_hash_mined(env, w, [first, replacement], replacement)
    # One attempt to send tx_1 again, refused, then the replacement: never a loop of
    # refused re-broadcasts. A refused re-broadcast was not sent, so it is not counted
    # (a re-broadcast is recorded once sent).
    assert env.progress(w).get("resent_1") is None
    assert env.transitions(w) == [
        "UPLOAD_EVIDENCE->SUBMIT_ONCHAIN",
        "SUBMIT_ONCHAIN->AWAIT_TX_CONFIRM",
        "AWAIT_TX_CONFIRM->SUBMIT_ONCHAIN",
        "SUBMIT_ONCHAIN->AWAIT_TX_CONFIRM",
        "AWAIT_TX_CONFIRM->COMPLETED",
    ]


@pytest.mark.usefixtures("manual_mining")
def test_a_node_that_keeps_dropping_the_tx_stalls_it_after_the_bound(chain_env: Env) -> None:
    env = chain_env
    key = f"eth:31337:{env.signer.address.lower()}"
    nonce = env.eth.nonce(env.signer.address)
    w = env.client.start(QuickWork, work_input(31, env.signer.address))
    with env.background():
        wait_for(lambda: env.progress(w).get("tx_1"), timeout=30, what="tx recorded")
        tx = env.progress(w)["tx_1"]
        for n in (1, 2, 3):  # the first broadcast, then the default bound of 3
            wait_for(lambda: env.eth.is_pending(tx["tx_hash"]), timeout=10, what="pooled")
            rpc(env.eth, "anvil_dropTransaction", tx["tx_hash"])
            wait_for(
                lambda n=n: env.progress(w).get(f"resent_{n}"),
                timeout=20,
                what=f"re-broadcast {n}",
            )
        wait_for(lambda: env.eth.is_pending(tx["tx_hash"]), timeout=10, what="pooled")
        rpc(env.eth, "anvil_dropTransaction", tx["tx_hash"])
        wait_for(lambda: env.status(w) == Status.STALLED, timeout=20, what="the stall")
    record = env.client.get(w)
    assert record.error is not None
    assert record.error["code"] == "tx_dropped"
    assert tx["tx_hash"] in record.error["message"]
    assert "after 3 re-broadcast" in record.error["message"]
    assert [record.progress[f"resent_{n}"]["tx_hash"] for n in (1, 2, 3)] == [tx["tx_hash"]] * 3
    assert record.progress.get("resent_4") is None
    assert record.progress.get("tx_2") is None  # never re-signed
    assert env.eth.nonce(env.signer.address, "pending") == nonce  # nothing in flight
    # The operator's view: the slot is still held by the STALLED instance, what it sent.
    [queue] = env.client.signers(chain_id=31337)
    assert (queue.key, queue.holder, queue.holder_status) == (key, w, "STALLED")
    assert (queue.pending_hash, queue.last_nonce) == (tx["tx_hash"], nonce)
    assert queue.sent[-1].sent_at == record.progress["resent_3"]["at"]
    # A node that still had it mines it after all: a resume follows it, sending nothing.
    env.eth.send_raw(tx["raw_hex"])
    rpc(env.eth, "evm_mine")
    env.client.resume(w)
    env.run()
    assert env.status(w) == Status.COMPLETED
    assert env.progress(w)["onchain_tx_hash"] == tx["tx_hash"]
    assert env.progress(w).get("resent_4") is None
    assert env.client.signers() == []
    assert len(env.work_events()) == 1


def _mined_at_depth_one_of_three(env: Env, w: str) -> dict[str, Any]:
    wait_for(lambda: env.progress(w).get("tx_1"), timeout=30, what="tx recorded")
    tx: dict[str, Any] = env.progress(w)["tx_1"]
    wait_for(lambda: env.eth.is_pending(tx["tx_hash"]), timeout=10, what="tx pooled")
    rpc(env.eth, "evm_mine")
    wait_for(lambda: seen_mined(env, w), timeout=10, what="the receipt seen at depth 1 of 3")
    assert env.progress(w).get("onchain_confirmed") is None
    return tx


def _send(env: Env, signer: LocalSigner, fn: str, *args: Any, **options: Any) -> str:
    tx = env.eth.build_call(env.contract, fn, *args, sender=signer.address, **options)
    return env.eth.send_raw(signer.sign_transaction(tx))


@pytest.mark.usefixtures("manual_mining")
def test_a_reorg_whose_new_blocks_use_our_nonce_resigns_with_a_fresh_one(chain_env: Env) -> None:
    env = chain_env
    # not_found_after long: only the nonce taken in the new blocks sends it back to submit.
    deep = settings(env.contract.address, confirmations=3, not_found_after=60.0)
    snapshot = rpc(env.eth, "evm_snapshot")
    w = env.client.start(QuickWork, work_input(32, env.signer.address))
    with env.background(chaoschain=deep):
        tx = _mined_at_depth_one_of_three(env, w)
        assert rpc(env.eth, "evm_revert", snapshot) is True
        # The new branch: another transaction of this signer at our nonce (paying more, in
        # case the node put ours back in its pool), and three blocks on top of it.
        other = env.eth.build_transaction(
            sender=env.signer.address, to=STUDIO, data="0x", value=1, nonce=tx["nonce"]
        )
        other.update(
            maxFeePerGas=2 * tx["max_fee_per_gas"],
            maxPriorityFeePerGas=2 * tx["max_priority_fee_per_gas"],
        )
        other_hash = env.eth.send_raw(env.signer.sign_transaction(other))
        for _ in range(3):
            rpc(env.eth, "evm_mine")
        assert env.eth.receipt_status(other_hash, confirmations=3).kind == "confirmed"
        wait_for(lambda: env.progress(w).get("tx_2"), timeout=20, what="a fresh signature")
        fresh = env.progress(w)["tx_2"]
        wait_for(lambda: env.eth.is_pending(fresh["tx_hash"]), timeout=10, what="pooled")
        for _ in range(3):
            rpc(env.eth, "evm_mine")
        wait_for(lambda: env.status(w) == Status.COMPLETED, timeout=20, what="completion")
    assert fresh["nonce"] == tx["nonce"] + 1
    assert env.eth.receipt_status(tx["tx_hash"]).kind == "not_found"  # gone with the branch
    progress = env.progress(w)
    assert progress["onchain_tx_hash"] == fresh["tx_hash"]
    assert progress["onchain_confirmed"] is True
    assert len(env.work_events()) == 1
    assert env.transitions(w) == [
        "UPLOAD_EVIDENCE->SUBMIT_ONCHAIN",
        "SUBMIT_ONCHAIN->AWAIT_TX_CONFIRM",
        "AWAIT_TX_CONFIRM->SUBMIT_ONCHAIN",
        "SUBMIT_ONCHAIN->AWAIT_TX_CONFIRM",
        "AWAIT_TX_CONFIRM->COMPLETED",
    ]


@pytest.mark.usefixtures("manual_mining")
def test_a_reorg_whose_new_blocks_hold_the_same_work_completes_on_chain_truth(
    chain_env: Env,
) -> None:
    env = chain_env
    deep = settings(env.contract.address, confirmations=3, not_found_after=3.0)
    other = env.signers[1]
    snapshot = rpc(env.eth, "evm_snapshot")
    inp = work_input(33, env.signer.address)
    w = env.client.start(QuickWork, inp)
    with env.background(chaoschain=deep):
        tx = _mined_at_depth_one_of_three(env, w)
        assert rpc(env.eth, "evm_revert", snapshot) is True
        # The new branch: the same work, submitted by another signer, three blocks deep.
        theirs = _send(
            env,
            other,
            "submitWork",
            STUDIO,
            1,
            bytes.fromhex(inp["data_hash"][2:]),
            "ar://somebody-else",
        )
        for _ in range(3):
            rpc(env.eth, "evm_mine")
        assert env.eth.receipt_status(theirs, confirmations=3).kind == "confirmed"
        wait_for(lambda: env.status(w) == Status.COMPLETED, timeout=30, what="completion")
    progress = env.progress(w)
    assert progress["already_on_chain"] is True
    assert progress.get("onchain_confirmed") is None
    [event] = env.work_events()
    assert event.args.submitter == other.address
    assert env.eth.receipt_status(tx["tx_hash"]).kind != "confirmed"
    assert env.store.lock_holder(f"eth:31337:{env.signer.address.lower()}") is None
