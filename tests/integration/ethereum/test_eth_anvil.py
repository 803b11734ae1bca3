"""The Ethereum adapter against a real anvil: every fault the transaction queue must handle."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from eth_utils.address import to_checksum_address
from web3.contract import Contract

from statemachine_wf.adapters.ethereum import (
    AlreadyKnown,
    AnvilNode,
    DevNodeError,
    EthereumClient,
    InsufficientFunds,
    LocalSigner,
    NonceTooLow,
    ReplacementUnderpriced,
    Reverted,
    RpcUnavailable,
    SignedTx,
    TxStatus,
    find_anvil,
    start_anvil,
)
from statemachine_wf.adapters.ethereum.devnode import free_port

pytestmark = pytest.mark.chain

STUDIO = to_checksum_address("0x00000000000000000000000000000000000057d1")
DATA_HASH = b"\x01" * 32


def rpc(client: EthereumClient, method: str, *params: Any) -> Any:
    response: Any = client.w3.provider.make_request(method, list(params))  # type: ignore[arg-type]
    assert "error" not in response, response
    return response["result"]


def sign_call(
    client: EthereumClient,
    signer: LocalSigner,
    contract: Contract,
    fn: str,
    *args: Any,
    **options: Any,
) -> tuple[dict[str, Any], SignedTx]:
    tx = client.build_call(contract, fn, *args, sender=signer.address, **options)
    return tx, signer.sign_transaction(tx)


@pytest.fixture
def manual_mining(eth_client: EthereumClient) -> Iterator[None]:
    """Turn automine off so transactions wait in the pool until ``evm_mine``."""
    rpc(eth_client, "evm_setAutomine", False)
    yield
    rpc(eth_client, "evm_setAutomine", True)


# --- the dev node ------------------------------------------------------------------------


def test_anvil_handle_keys_and_stop_by_pid(tmp_path: Path) -> None:
    with start_anvil() as node:
        client = EthereumClient.from_url(node.url)
        assert client.chain_id == node.chain_id == 31337
        assert list(client.w3.eth.accounts) == list(node.addresses)
        signers = [LocalSigner.from_private_key(k).address for k in node.private_keys]
        assert signers == list(node.addresses)
        assert node.running
        assert "0xac09" not in repr(node)  # dev keys stay out of reprs/logs too
    assert not node.running
    with pytest.raises(ProcessLookupError):
        os.kill(node.pid, 0)
    node.stop()  # idempotent


def test_find_anvil_looks_upward(tmp_path: Path) -> None:
    here = Path(__file__).resolve().parent
    assert find_anvil(here) == find_anvil(here.parents[2])
    assert find_anvil(here).name == "anvil"
    with pytest.raises(DevNodeError, match="npm install"):
        find_anvil(tmp_path)


def test_block_time_mines_without_transactions() -> None:
    with start_anvil(block_time=0.2) as node:
        client = EthereumClient.from_url(node.url)
        start = client.block_number()
        time.sleep(0.7)
        assert client.block_number() > start


# --- happy path --------------------------------------------------------------------------


def test_submit_work_round_trip_with_confirmations(
    eth_client: EthereumClient, eth_signer: LocalSigner, deployed_contract: Contract
) -> None:
    _, signed = sign_call(
        eth_client, eth_signer, deployed_contract, "submitWork", STUDIO, 1, DATA_HASH, "ar://x"
    )
    assert eth_client.send_raw(signed) == signed.tx_hash
    # anvil's automine mines the transaction just after the call returns, not during it.
    assert eth_client.wait(signed.tx_hash).kind == "confirmed"  # 1 deep, in its own block
    status = eth_client.receipt_status(signed.tx_hash, confirmations=3)
    assert (status.kind, status.confirmations, status.receipt_status) == ("pending", 1, 1)
    rpc(eth_client, "anvil_mine", 2)
    status = eth_client.receipt_status(signed.tx_hash, confirmations=3)
    assert status.kind == "confirmed"
    assert status.confirmations == 3
    assert eth_client.call_view(deployed_contract, "workSubmitted", STUDIO, 1, DATA_HASH)
    receipt = eth_client.w3.eth.get_transaction_receipt(signed.tx_hash)  # type: ignore[arg-type]
    (event,) = deployed_contract.events.WorkSubmitted().process_receipt(receipt)
    assert event["args"]["evidenceId"] == "ar://x"
    assert event["args"]["submitter"] == eth_signer.address


def test_safe_and_finalized_rules(
    eth_client: EthereumClient, eth_signer: LocalSigner, deployed_contract: Contract
) -> None:
    _, signed = sign_call(eth_client, eth_signer, deployed_contract, "closeEpoch", STUDIO, 1)
    # anvil's automine mines it just after the call returns: wait for that block.
    assert eth_client.wait(eth_client.send_raw(signed)).kind == "confirmed"
    assert eth_client.receipt_status(signed.tx_hash).kind == "confirmed"
    assert eth_client.receipt_status(signed.tx_hash, confirmations="safe").kind == "pending"
    # anvil: safe = head - 32, finalized = head - 64.
    rpc(eth_client, "anvil_mine", 40)
    assert eth_client.receipt_status(signed.tx_hash, confirmations="safe").kind == "confirmed"
    assert eth_client.receipt_status(signed.tx_hash, confirmations="finalized").kind == "pending"
    rpc(eth_client, "anvil_mine", 40)
    status = eth_client.receipt_status(signed.tx_hash, confirmations="finalized")
    assert status.kind == "confirmed"


# --- reverts -----------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["already submitted", "epoch closed"])
def test_revert_reasons_before_sending_and_mined(
    eth_client: EthereumClient,
    eth_signer: LocalSigner,
    deployed_contract: Contract,
    reason: str,
) -> None:
    setup = "submitWork" if reason == "already submitted" else "closeEpoch"
    setup_args = (STUDIO, 1, DATA_HASH, "e") if setup == "submitWork" else (STUDIO, 1)
    _, signed = sign_call(eth_client, eth_signer, deployed_contract, setup, *setup_args)
    eth_client.wait(eth_client.send_raw(signed))
    args = (STUDIO, 1, b"\x02" * 32 if reason == "epoch closed" else DATA_HASH, "e")

    # Before sending: the estimate sees the revert.
    with pytest.raises(Reverted) as caught:
        eth_client.build_call(deployed_contract, "submitWork", *args, sender=eth_signer.address)
    assert caught.value.reason == reason
    assert caught.value.data is not None
    with pytest.raises(Reverted, match=reason):
        eth_client.call_view(deployed_contract, "submitWork", *args)

    # Mined with a fixed gas limit: status 0, and the reason is recovered.
    _, signed = sign_call(
        eth_client, eth_signer, deployed_contract, "submitWork", *args, gas=200_000
    )
    status = eth_client.wait(eth_client.send_raw(signed))
    assert status == TxStatus(
        kind="reverted",
        tx_hash=signed.tx_hash,
        block_number=status.block_number,
        confirmations=1,
        receipt_status=0,
        revert_reason=reason,
    )


def test_revert_reason_by_replay_when_debug_trace_is_unavailable(
    eth_client: EthereumClient,
    eth_signer: LocalSigner,
    deployed_contract: Contract,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, signed = sign_call(eth_client, eth_signer, deployed_contract, "closeEpoch", STUDIO, 1)
    eth_client.wait(eth_client.send_raw(signed))
    _, signed = sign_call(
        eth_client, eth_signer, deployed_contract, "closeEpoch", STUDIO, 1, gas=100_000
    )
    eth_client.wait(eth_client.send_raw(signed))  # mined (reverted) just after the call
    mined_in = eth_client.w3.eth.get_transaction_receipt(signed.tx_hash)["blockNumber"]  # type: ignore[arg-type]
    real = eth_client.w3.provider.make_request
    calls: list[str] = []

    def no_debug(method: Any, params: Any) -> Any:
        calls.append(str(method))
        if method == "debug_traceTransaction":  # like most hosted RPCs
            return {"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "no"}}
        return real(method, params)

    real_call = eth_client.w3.eth.call
    replayed_at: list[Any] = []

    def spy_call(tx: Any, block: Any = None) -> Any:
        replayed_at.append(block)
        return real_call(tx, block)

    monkeypatch.setattr(eth_client.w3.provider, "make_request", no_debug)
    monkeypatch.setattr(eth_client.w3.eth, "call", spy_call)
    assert eth_client.revert_reason(signed.tx_hash) == "epoch closed"
    assert calls == ["debug_traceTransaction"]
    assert replayed_at == [mined_in - 1]


# --- nonce and mempool faults ------------------------------------------------------------


def test_nonce_too_low(
    eth_client: EthereumClient, eth_signer: LocalSigner, deployed_contract: Contract
) -> None:
    _, signed = sign_call(
        eth_client, eth_signer, deployed_contract, "closeEpoch", STUDIO, 7, nonce=0
    )
    with pytest.raises(NonceTooLow) as caught:
        eth_client.send_raw(signed)
    assert caught.value.retryable


def test_already_known_in_pool_and_after_mining(
    eth_client: EthereumClient,
    eth_signer: LocalSigner,
    deployed_contract: Contract,
    manual_mining: None,
) -> None:
    _, signed = sign_call(eth_client, eth_signer, deployed_contract, "closeEpoch", STUDIO, 1)
    eth_client.send_raw(signed)
    with pytest.raises(AlreadyKnown) as caught:
        eth_client.send_raw(signed)
    assert caught.value.tx_hash == signed.tx_hash

    assert eth_client.is_pending(signed.tx_hash)
    assert eth_client.receipt_status(signed.tx_hash) == TxStatus("pending", signed.tx_hash)
    assert eth_client.pending_count(eth_signer.address) == 1
    assert eth_client.pending_transactions(eth_signer.address) == {signed.nonce: signed.tx_hash}

    rpc(eth_client, "evm_mine")
    assert eth_client.receipt_status(signed.tx_hash).kind == "confirmed"
    assert eth_client.pending_count(eth_signer.address) == 0
    # Re-sending mined bytes (a crash after send, before the hash was persisted):
    # the node says "nonce too low"; the client recognises its own transaction.
    with pytest.raises(AlreadyKnown) as caught:
        eth_client.send_raw(signed)
    assert caught.value.tx_hash == signed.tx_hash


def test_replacement_underpriced_then_fee_bump_replaces_the_stuck_tx(
    eth_client: EthereumClient,
    eth_signer: LocalSigner,
    deployed_contract: Contract,
    manual_mining: None,
) -> None:
    tx, stuck = sign_call(
        eth_client, eth_signer, deployed_contract, "submitWork", STUDIO, 1, DATA_HASH, "e"
    )
    eth_client.send_raw(stuck)
    # Same nonce and fees, different content: refused.
    same_fees = {
        **tx,
        "data": eth_client.build_call(
            deployed_contract, "closeEpoch", STUDIO, 1, sender=eth_signer.address
        )["data"],
    }
    with pytest.raises(ReplacementUnderpriced):
        eth_client.send_raw(eth_signer.sign_transaction(same_fees))

    bumped = eth_client.bump_fees(tx, factor=1.1)
    assert bumped["nonce"] == tx["nonce"]
    assert bumped["maxFeePerGas"] * 10 >= tx["maxFeePerGas"] * 11
    assert bumped["maxPriorityFeePerGas"] * 10 >= tx["maxPriorityFeePerGas"] * 11
    replacement = eth_signer.sign_transaction(bumped)
    assert replacement.tx_hash != stuck.tx_hash
    eth_client.send_raw(replacement)
    assert eth_client.pending_transactions(eth_signer.address) == {tx["nonce"]: replacement.tx_hash}

    rpc(eth_client, "evm_mine")
    assert eth_client.receipt_status(replacement.tx_hash).kind == "confirmed"
    assert eth_client.receipt_status(stuck.tx_hash) == TxStatus("not_found", stuck.tx_hash)


def test_never_broadcast_hash_is_not_found(
    eth_client: EthereumClient, eth_signer: LocalSigner, deployed_contract: Contract
) -> None:
    _, signed = sign_call(eth_client, eth_signer, deployed_contract, "closeEpoch", STUDIO, 1)
    assert eth_client.receipt_status(signed.tx_hash) == TxStatus("not_found", signed.tx_hash)
    assert not eth_client.is_pending(signed.tx_hash)


def test_reorg_makes_a_confirmed_receipt_disappear(
    eth_client: EthereumClient, eth_signer: LocalSigner, deployed_contract: Contract
) -> None:
    snapshot = rpc(eth_client, "evm_snapshot")
    _, signed = sign_call(
        eth_client, eth_signer, deployed_contract, "submitWork", STUDIO, 1, DATA_HASH, "e"
    )
    eth_client.wait(eth_client.send_raw(signed))  # automine: its own block, then two more
    rpc(eth_client, "anvil_mine", 2)
    assert eth_client.receipt_status(signed.tx_hash, confirmations=3).kind == "confirmed"
    assert rpc(eth_client, "evm_revert", snapshot) is True
    assert eth_client.receipt_status(signed.tx_hash, confirmations=3).kind == "not_found"
    assert not eth_client.call_view(deployed_contract, "workSubmitted", STUDIO, 1, DATA_HASH)


def test_insufficient_funds(eth_client: EthereumClient, deployed_contract: Contract) -> None:
    poor = LocalSigner.from_private_key("0x" + "c3" * 32)
    tx = eth_client.build_call(
        deployed_contract, "closeEpoch", STUDIO, 1, sender=poor.address, gas=100_000, nonce=0
    )
    with pytest.raises(InsufficientFunds) as caught:
        eth_client.send_raw(poor.sign_transaction(tx))
    assert not caught.value.retryable


# --- the node is gone --------------------------------------------------------------------


def test_closed_port_is_rpc_unavailable_fast() -> None:
    client = EthereumClient.from_url(f"http://127.0.0.1:{free_port()}", timeout=1.0)
    started = time.monotonic()
    with pytest.raises(RpcUnavailable) as caught:
        client.receipt_status("0x" + "00" * 32)
    assert caught.value.retryable
    assert time.monotonic() - started < 1.0


def test_silent_node_times_out_as_rpc_unavailable() -> None:
    # A socket that accepts connections (kernel backlog) but never answers.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        client = EthereumClient.from_url(f"http://127.0.0.1:{server.getsockname()[1]}", timeout=0.3)
        started = time.monotonic()
        with pytest.raises(RpcUnavailable):
            client.block_number()
        assert time.monotonic() - started < 2.0


def test_node_dies_mid_use(anvil: AnvilNode, eth_client: EthereumClient) -> None:
    assert eth_client.block_number() == 0
    anvil.stop()
    with pytest.raises(RpcUnavailable):
        eth_client.nonce(anvil.addresses[0])
