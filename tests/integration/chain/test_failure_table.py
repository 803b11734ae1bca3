"""Every row of seed 002's per-step failure table, on anvil + arlocal.

==================  ===========================  =====================================
UPLOAD_EVIDENCE     network error                retry with backoff
UPLOAD_EVIDENCE     Arweave rejects (invalid)    FAILED
UPLOAD_EVIDENCE     Arweave rejects (no funds)   STALLED
SUBMIT_ONCHAIN      nonce too low                reconcile, retry
SUBMIT_ONCHAIN      revert "already submitted"   reconcile -> COMPLETED
SUBMIT_ONCHAIN      revert "epoch closed"        FAILED
AWAIT_TX_CONFIRM    tx pending                   keep polling
AWAIT_TX_CONFIRM    tx not found after timeout   retry submission
==================  ===========================  =====================================

plus the fee bump of a stuck transaction.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from statemachine_wf import Status
from statemachine_wf.adapters.arweave import ArweaveClient, ArweaveWallet
from statemachine_wf.adapters.ethereum import EthereumClient, LocalSigner, SignedTx

from .conftest import Env, rpc, wait_for
from .flows import STUDIO, QuickWork, work_input

pytestmark = pytest.mark.chain


def failures(env: Env, instance_id: str) -> list[tuple[str | None, str, str]]:
    """(step, outcome, error code) of every STEP_FAILED."""
    return [
        (e.node, e.payload["outcome"], (e.error or {}).get("code", ""))
        for e in env.client.history(instance_id)
        if e.event_type == "STEP_FAILED"
    ]


class FlakyTransport(httpx.BaseTransport):
    """Refuses the first ``n`` ``POST /tx`` like a gateway that is down, then passes."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == "/tx" and self.left > 0:
            self.left -= 1
            raise httpx.ConnectError("connection refused (test)", request=request)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


class TamperingTransport(httpx.BaseTransport):
    """Changes one byte of the posted data: the gateway must reject the transaction."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == "/tx":
            body = json.loads(request.read())
            raw = bytearray(base64.urlsafe_b64decode(body["data"] + "=="))
            raw[0] ^= 0x01
            body["data"] = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
            request = httpx.Request(request.method, request.url, json=body)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def test_upload_network_error_retries_with_backoff(chain_env: Env) -> None:
    env = chain_env
    flaky = ArweaveClient(env.arlocal.url, env.wallet, transport=FlakyTransport(2))
    w = env.client.start(QuickWork, work_input(1, env.signer.address))
    env.run(arweave=flaky)
    assert env.status(w) == Status.COMPLETED
    assert failures(env, w) == [
        ("UPLOAD_EVIDENCE", "retry", "GatewayUnavailable"),
        ("UPLOAD_EVIDENCE", "retry", "GatewayUnavailable"),
    ]
    waits = [e.payload["retry_in"] for e in env.client.history(w) if e.event_type == "STEP_FAILED"]
    assert waits == [0.1, 0.2]  # exponential backoff (the quick policy: 0.1 s doubling)
    # One upload: the id saved before the first post is the one that was posted.
    tx_id = env.progress(w)["arweave_tx_id"]
    assert env.arweave.status(tx_id).kind in ("pending", "confirmed")
    flaky.close()


def test_upload_rejected_as_invalid_fails(chain_env: Env) -> None:
    env = chain_env
    tampering = ArweaveClient(env.arlocal.url, env.wallet, transport=TamperingTransport())
    nonce = env.eth.nonce(env.signer.address)
    w = env.client.start(QuickWork, work_input(2, env.signer.address))
    env.run(arweave=tampering)
    record = env.client.get(w)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error["step"] == "UPLOAD_EVIDENCE"
    assert record.error["code"] == "InvalidTransaction"
    assert record.error["recoverable"] is False
    assert env.eth.nonce(env.signer.address) == nonce  # nothing went on chain
    tampering.close()


def test_upload_without_funds_stalls_then_resumes(
    chain_env: Env, unfunded_arweave_wallet: ArweaveWallet
) -> None:
    env = chain_env
    poor = ArweaveClient(env.arlocal.url, unfunded_arweave_wallet)
    w = env.client.start(QuickWork, work_input(3, env.signer.address))
    env.run(arweave=poor)
    record = env.client.get(w)
    assert record.status == Status.STALLED
    assert record.error is not None
    assert record.error["code"] == "InsufficientFunds"
    assert record.error["recoverable"] is True
    tx_id = record.progress["arweave_tx_id"]  # saved before the post that was refused
    env.arlocal.mint(unfunded_arweave_wallet.address, 10**12)
    env.client.resume(w)
    env.run(arweave=poor)
    assert env.status(w) == Status.COMPLETED
    assert env.progress(w)["arweave_tx_id"] == tx_id  # the same upload, not a new one
    assert env.arweave.status(tx_id).kind in ("pending", "confirmed")
    poor.close()


class Interloper(EthereumClient):
    """Before our first broadcast, another path uses the signer's next nonce."""

    def __init__(self, base: EthereumClient, signer: LocalSigner) -> None:
        super().__init__(base.w3)
        self.signer = signer
        self.sprung = False

    def send_raw(self, raw: SignedTx | bytes | str) -> str:
        if not self.sprung:
            self.sprung = True
            nonce = self.nonce(self.signer.address, "pending")
            other = self.build_transaction(
                sender=self.signer.address, to=STUDIO, data="0x", value=1, nonce=nonce
            )
            # anvil's automine mines it just after the call returns: wait for that block,
            # or ours meets it still pending ("replacement underpriced", not "nonce too low").
            self.wait(super().send_raw(self.signer.sign_transaction(other)))
        return super().send_raw(raw)


def test_nonce_too_low_reconciles_and_retries(chain_env: Env) -> None:
    env = chain_env
    start = env.eth.nonce(env.signer.address)
    w = env.client.start(QuickWork, work_input(4, env.signer.address))
    env.run(eth=Interloper(env.eth, env.signer))
    assert env.status(w) == Status.COMPLETED, env.events(w)
    assert failures(env, w) == [("SUBMIT_ONCHAIN", "retry", "NonceTooLow")]
    progress = env.progress(w)
    # The first record lost its nonce to the interloper; the retry signed the next one.
    assert progress["tx_1"]["nonce"] == start
    assert progress["tx_2"]["nonce"] == start + 1
    assert progress["onchain_tx_hash"] == progress["tx_2"]["tx_hash"]
    assert env.eth.nonce(env.signer.address) == start + 2  # no gap, nothing extra
    assert len(env.work_events()) == 1


class NoEstimate(EthereumClient):
    """Fixed gas instead of an estimate: a revert is only seen once mined."""

    def estimate_gas(self, tx: Any) -> int:
        return 250_000


@pytest.mark.usefixtures("manual_mining")
def test_already_submitted_revert_reconciles_to_completed(chain_env: Env) -> None:
    env = chain_env
    # Two submissions of the same work from two signers race; both are broadcast.
    inp = work_input(5, env.signers[0].address)
    first = env.client.start(QuickWork, inp)
    second = env.client.start(QuickWork, {**inp, "signer_address": env.signers[1].address})
    with env.background(eth=NoEstimate(env.eth.w3)):
        wait_for(
            lambda: all(env.progress(i).get("tx_1") for i in (first, second)),
            timeout=30,
            what="both transactions recorded",
        )
        wait_for(
            lambda: all(
                env.eth.is_pending(env.progress(i)["tx_1"]["tx_hash"]) for i in (first, second)
            ),
            timeout=10,
            what="both in the pool",
        )
        rpc(env.eth, "evm_mine")
        wait_for(
            lambda: all(env.status(i) == Status.COMPLETED for i in (first, second)),
            timeout=30,
            what="both completed",
        )
    statuses = {
        i: env.eth.receipt_status(env.progress(i)["tx_1"]["tx_hash"]) for i in (first, second)
    }
    winner = next(i for i, s in statuses.items() if s.kind == "confirmed")
    loser = next(i for i, s in statuses.items() if s.kind == "reverted")
    assert statuses[loser].revert_reason == "already submitted"
    assert env.progress(winner)["onchain_confirmed"] is True
    assert env.progress(loser)["already_on_chain"] is True
    assert env.progress(loser).get("onchain_confirmed") is None
    assert len(env.work_events()) == 1


def test_epoch_closed_fails_without_sending(chain_env: Env) -> None:
    env = chain_env
    closer = env.signers[2]
    close = env.eth.build_call(env.contract, "closeEpoch", STUDIO, 9, sender=closer.address)
    env.eth.wait(env.eth.send_raw(closer.sign_transaction(close)))
    nonce = env.eth.nonce(env.signer.address)
    w = env.client.start(QuickWork, work_input(6, env.signer.address, epoch=9))
    env.run()
    record = env.client.get(w)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error["code"] == "epoch_closed"
    assert record.error["step"] == "SUBMIT_ONCHAIN"
    assert record.error["recoverable"] is False
    assert env.eth.nonce(env.signer.address) == nonce
    assert "tx_1" not in record.progress or record.progress["tx_1"] is None
    assert env.store.lock_holder(f"eth:31337:{env.signer.address.lower()}") is None


@pytest.mark.usefixtures("manual_mining")
def test_pending_tx_keeps_waiting(chain_env: Env) -> None:
    env = chain_env
    w = env.client.start(QuickWork, work_input(7, env.signer.address))
    with env.background():

        def snoozes() -> int:
            return sum(
                1
                for e in env.client.history(w)
                if e.event_type == "STEP_WAITING" and "pending" in e.payload.get("reason", "")
            )

        wait_for(lambda: snoozes() >= 5, timeout=30, what="five pending checks")
        assert env.status(w) == Status.RUNNING
        assert failures(env, w) == []  # waiting is not failing
        rpc(env.eth, "evm_mine")
        wait_for(lambda: env.status(w) == Status.COMPLETED, timeout=20, what="completion")
    assert env.progress(w)["onchain_tx_hash"] == env.progress(w)["tx_1"]["tx_hash"]


@pytest.mark.usefixtures("manual_mining")
def test_tx_not_found_after_timeout_is_resubmitted(chain_env: Env) -> None:
    env = chain_env
    w = env.client.start(QuickWork, work_input(8, env.signer.address))
    with env.background():
        wait_for(lambda: env.progress(w).get("tx_1"), timeout=30, what="tx recorded")
        tx_hash = env.progress(w)["tx_1"]["tx_hash"]
        wait_for(lambda: env.eth.is_pending(tx_hash), timeout=10, what="tx in the pool")
        rpc(env.eth, "anvil_dropTransaction", tx_hash)
        wait_for(
            lambda: "AWAIT_TX_CONFIRM->SUBMIT_ONCHAIN" in env.transitions(w),
            timeout=20,
            what="the lost tx sent back to SUBMIT_ONCHAIN",
        )
        wait_for(lambda: env.eth.is_pending(tx_hash), timeout=10, what="the same tx re-sent")
        rpc(env.eth, "evm_mine")
        wait_for(lambda: env.status(w) == Status.COMPLETED, timeout=20, what="completion")
    progress = env.progress(w)
    assert progress["onchain_tx_hash"] == tx_hash  # the recorded bytes, re-broadcast
    assert progress.get("tx_2") is None
    assert len(env.work_events()) == 1


@pytest.mark.usefixtures("manual_mining")
def test_stuck_tx_is_replaced_with_a_fee_bump(chain_env: Env) -> None:
    env = chain_env
    from .flows import settings

    quick_bump = settings(env.contract.address, stuck_after=0.5)
    w = env.client.start(QuickWork, work_input(9, env.signer.address))
    with env.background(chaoschain=quick_bump):
        wait_for(lambda: env.progress(w).get("tx_2"), timeout=30, what="a replacement")
        replacement = env.progress(w)["tx_2"]["tx_hash"]
        wait_for(lambda: env.eth.is_pending(replacement), timeout=10, what="replacement pooled")
        rpc(env.eth, "evm_mine")
        wait_for(lambda: env.status(w) == Status.COMPLETED, timeout=20, what="completion")
    progress = env.progress(w)
    old, new = progress["tx_1"], progress["tx_2"]
    assert new["nonce"] == old["nonce"]
    assert new["max_fee_per_gas"] * 10 >= old["max_fee_per_gas"] * 11
    assert new["max_priority_fee_per_gas"] * 10 >= old["max_priority_fee_per_gas"] * 11
    assert progress["onchain_tx_hash"] == new["tx_hash"]
    assert env.eth.receipt_status(old["tx_hash"]).kind == "not_found"  # replaced
    assert len(env.work_events()) == 1
