"""Reconciliation against the chain: start-up, reorgs, an unreachable RPC, bad input."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from statemachine_wf import InputError, Status
from statemachine_wf.adapters.ethereum import EthereumClient
from statemachine_wf.adapters.ethereum.devnode import free_port

from .conftest import Env, close_http, rpc, wait_for
from .flows import STUDIO, QuickWork, settings, work_input

pytestmark = pytest.mark.chain


def dead_rpc() -> EthereumClient:
    """A client whose node refuses connections (nothing listens on the port)."""
    return EthereumClient.from_url(f"http://127.0.0.1:{free_port()}", timeout=1.0)


def test_rpc_refusing_connections_retries_then_stalls(chain_env: Env) -> None:
    env = chain_env
    dead = dead_rpc()
    w = env.client.start(QuickWork, work_input(20, env.signer.address))
    env.run(eth=dead)
    record = env.client.get(w)
    assert record.status == Status.STALLED
    assert record.error is not None
    assert record.error["code"] == "RpcUnavailable"
    assert record.error["recoverable"] is True
    outcomes = [
        e.payload["outcome"] for e in env.client.history(w) if e.event_type == "STEP_FAILED"
    ]
    assert outcomes == ["retry", "retry", "retry", "stall"]  # never "fail"
    assert not any(e.event_type == "QUARANTINED" for e in env.client.history(w))
    # No runner crash either: the one dead letter is the exhausted retries (issue 5).
    letters = env.store.dead_letters()
    assert [(d["instance_id"], "retries exhausted" in d["reason"]) for d in letters] == [(w, True)]
    # The node is back: a resume finishes the job.
    env.client.resume(w)
    env.run()
    assert env.status(w) == Status.COMPLETED
    close_http(dead)


def test_startup_reconciliation_completes_work_found_on_chain(chain_env: Env) -> None:
    env = chain_env
    inp = work_input(21, env.signer.address)
    w = env.client.start(QuickWork, inp)
    dead = dead_rpc()
    env.run(eth=dead)  # uploads, then stalls on the chain: STALLED in SUBMIT_ONCHAIN
    assert env.status(w) == Status.STALLED
    # Meanwhile the same work reaches the chain by another path.
    other = env.signers[1]
    tx = env.eth.build_call(
        env.contract,
        "submitWork",
        STUDIO,
        inp["epoch"],
        bytes.fromhex(inp["data_hash"][2:]),
        "ar://submitted-elsewhere",
        sender=other.address,
    )
    env.eth.wait(env.eth.send_raw(other.sign_transaction(tx)))
    nonce = env.eth.nonce(env.signer.address)
    env.run()  # a new runner: the start-up pass reconciles the STALLED instance
    assert env.status(w) == Status.COMPLETED
    assert env.eth.nonce(env.signer.address) == nonce  # not a single transaction sent
    (rec,) = [e for e in env.client.history(w) if e.event_type == "RECONCILED"]
    assert rec.payload["decision"] == "complete"
    assert rec.payload["evidence"]["work_submitted"] is True
    assert rec.payload["evidence"]["evidence_id"] == "ar://submitted-elsewhere"
    assert env.progress(w)["already_on_chain"] is True
    assert len(env.work_events()) == 1
    close_http(dead)


@pytest.mark.usefixtures("manual_mining")
def test_reorg_before_depth_lowers_the_state_and_resubmits(chain_env: Env) -> None:
    env = chain_env
    deep = settings(env.contract.address, confirmations=3)
    snapshot = rpc(env.eth, "evm_snapshot")
    w = env.client.start(QuickWork, work_input(22, env.signer.address))
    with env.background(chaoschain=deep):
        wait_for(lambda: env.progress(w).get("tx_1"), timeout=30, what="tx recorded")
        tx_hash = env.progress(w)["tx_1"]["tx_hash"]
        wait_for(lambda: env.eth.is_pending(tx_hash), timeout=10, what="tx in the pool")
        rpc(env.eth, "evm_mine")

        def seen_mined() -> bool:
            return any(
                "mined in" in e.payload.get("reason", "")
                for e in env.client.history(w)
                if e.event_type == "STEP_WAITING"
            )

        wait_for(seen_mined, timeout=10, what="the receipt seen at depth 1 of 3")
        assert env.progress(w).get("onchain_confirmed") is None  # not deep enough yet
        assert rpc(env.eth, "evm_revert", snapshot) is True  # the block is gone
        wait_for(
            lambda: "AWAIT_TX_CONFIRM->SUBMIT_ONCHAIN" in env.transitions(w),
            timeout=20,
            what="the state lowered back to SUBMIT_ONCHAIN",
        )
        wait_for(lambda: env.eth.is_pending(tx_hash), timeout=10, what="the tx re-sent")
        for _ in range(3):
            rpc(env.eth, "evm_mine")
        wait_for(lambda: env.status(w) == Status.COMPLETED, timeout=20, what="completion")
    progress = env.progress(w)
    assert progress["onchain_confirmed"] is True
    assert progress["onchain_tx_hash"] == tx_hash
    assert env.eth.receipt_status(tx_hash, confirmations=3).kind == "confirmed"
    assert len(env.work_events()) == 1
    assert env.transitions(w) == [
        "UPLOAD_EVIDENCE->SUBMIT_ONCHAIN",
        "SUBMIT_ONCHAIN->AWAIT_TX_CONFIRM",
        "AWAIT_TX_CONFIRM->SUBMIT_ONCHAIN",
        "SUBMIT_ONCHAIN->AWAIT_TX_CONFIRM",
        "AWAIT_TX_CONFIRM->COMPLETED",
    ]


GOOD = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"studio_address": "0x1234"}, "studio_address"),
        ({"studio_address": "0xZZ997970C51812dc3A010C7d01b50e0d17dc79C8"}, "studio_address"),
        ({"signer_address": GOOD.replace("C51812dc", "c51812DC")}, "signer_address"),
        ({"signer_address": "0x" + "0" * 40}, "signer_address"),
        ({"data_hash": "0x1234"}, "data_hash"),
        ({"data_hash": "ab" * 32}, "data_hash"),
        ({"data_hash": "0x" + "11" * 32}, "data_hash"),  # well-formed, not the evidence's
        ({"epoch": -1}, "epoch"),
        ({"evidence": ""}, "evidence"),
        ({"unexpected": 1}, "unexpected"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    chain_env: Env, change: dict[str, Any], field: str
) -> None:
    env = chain_env
    inp = {**work_input(23, GOOD), **change}
    with pytest.raises(InputError) as info:  # was pydantic's ValidationError (defect 9)
        env.client.start(QuickWork, inp)
    assert isinstance(info.value.__cause__, ValidationError)
    errors = info.value.__cause__.errors()
    assert any(field in map(str, e["loc"]) or field in e["msg"] for e in errors), errors
    assert env.store.list_instances() == []
