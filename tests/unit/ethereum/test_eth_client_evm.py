"""EthereumClient on the in-process py-evm: the same domain answers as on a node."""

from __future__ import annotations

from typing import Any

import pytest
from eth_utils.address import to_checksum_address
from web3.contract import Contract

from statemachine_wf.adapters.ethereum import (
    AlreadyKnown,
    EthereumClient,
    InsufficientFunds,
    LocalSigner,
    NonceTooLow,
    Reverted,
    TxStatus,
)
from statemachine_wf.errors import InputError

STUDIO = to_checksum_address("0x00000000000000000000000000000000000057d1")
DATA_HASH = b"\x01" * 32


def mine(client: EthereumClient, blocks: int) -> None:
    client.w3.provider.ethereum_tester.mine_blocks(blocks)  # type: ignore[attr-defined]


def send(client: EthereumClient, signer: LocalSigner, tx: dict[str, Any]) -> str:
    return client.send_raw(signer.sign_transaction(tx))


def submit_work(
    client: EthereumClient, signer: LocalSigner, contract: Contract, **options: Any
) -> str:
    tx = client.build_call(
        contract,
        "submitWork",
        STUDIO,
        1,
        DATA_HASH,
        "ar://evidence",
        sender=signer.address,
        **options,
    )
    return send(client, signer, tx)


def test_chain_id_and_nonces(evm_client: EthereumClient, evm_signer: LocalSigner) -> None:
    assert evm_client.chain_id == 131277322940537
    assert evm_client.nonce(evm_signer.address) == 0
    assert evm_client.nonce(evm_signer.address, "pending") == 0
    assert evm_client.pending_count(evm_signer.address) == 0
    # py-evm has no txpool_content: the client says "unknown", not "empty".
    assert evm_client.pending_transactions(evm_signer.address) is None


def test_built_transaction_is_eip1559_with_margin(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    tx = evm_client.build_call(
        evm_contract, "submitWork", STUDIO, 1, DATA_HASH, "e", sender=evm_signer.address
    )
    estimate = evm_client.estimate_gas(tx)
    assert tx["type"] == 2
    assert tx["chainId"] == evm_client.chain_id
    assert tx["nonce"] == 1  # the deploy used 0
    assert tx["gas"] == -(-estimate * 12 // 10)  # ceil(estimate * 1.2)
    assert tx["maxFeePerGas"] >= tx["maxPriorityFeePerGas"] > 0
    assert tx["to"] == evm_contract.address


def test_submit_work_round_trip_with_confirmations(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    tx_hash = submit_work(evm_client, evm_signer, evm_contract)
    status = evm_client.receipt_status(tx_hash, confirmations=3)
    assert status.kind == "pending"  # mined, but only 1 deep
    assert (status.confirmations, status.receipt_status) == (1, 1)
    mine(evm_client, 2)
    status = evm_client.receipt_status(tx_hash, confirmations=3)
    assert status == TxStatus(
        kind="confirmed",
        tx_hash=tx_hash,
        block_number=status.block_number,
        confirmations=3,
        receipt_status=1,
    )
    assert evm_client.call_view(evm_contract, "workSubmitted", STUDIO, 1, DATA_HASH) is True
    assert evm_client.call_view(evm_contract, "workEvidence", STUDIO, 1, DATA_HASH) == [
        evm_signer.address,
        "ar://evidence",
    ]
    # py-evm: safe and finalized are the head, so both rules hold at once.
    assert evm_client.receipt_status(tx_hash, confirmations="finalized").kind == "confirmed"


def test_reverts_before_sending_and_mined(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    evm_client.wait(submit_work(evm_client, evm_signer, evm_contract))
    with pytest.raises(Reverted) as caught:
        submit_work(evm_client, evm_signer, evm_contract)
    assert caught.value.reason == "already submitted"

    # With a fixed gas limit nothing is estimated: the revert is mined (status 0).
    tx_hash = submit_work(evm_client, evm_signer, evm_contract, gas=200_000)
    status = evm_client.wait(tx_hash)
    assert (status.kind, status.receipt_status) == ("reverted", 0)
    assert status.revert_reason == "already submitted"


def test_score_and_close_epoch_rules(
    evm_client: EthereumClient,
    evm_signer: LocalSigner,
    evm_signer2: LocalSigner,
    evm_contract: Contract,
) -> None:
    def call(signer: LocalSigner, fn: str, *args: Any) -> TxStatus:
        tx = evm_client.build_call(evm_contract, fn, *args, sender=signer.address)
        return evm_client.wait(send(evm_client, signer, tx))

    with pytest.raises(Reverted, match="unknown work"):
        call(evm_signer2, "submitScore", STUDIO, 1, DATA_HASH, 80)
    assert call(evm_signer, "submitWork", STUDIO, 1, DATA_HASH, "e").kind == "confirmed"
    assert call(evm_signer2, "submitScore", STUDIO, 1, DATA_HASH, 80).kind == "confirmed"
    scored = evm_client.call_view(
        evm_contract, "scoreSubmitted", STUDIO, 1, DATA_HASH, evm_signer2.address
    )
    assert scored is True
    with pytest.raises(Reverted, match="already submitted"):
        call(evm_signer2, "submitScore", STUDIO, 1, DATA_HASH, 90)
    # Another scorer may still score the same work.
    assert call(evm_signer, "submitScore", STUDIO, 1, DATA_HASH, 70).kind == "confirmed"

    assert call(evm_signer, "closeEpoch", STUDIO, 1).kind == "confirmed"
    assert evm_client.call_view(evm_contract, "epochClosed", STUDIO, 1) is True
    with pytest.raises(Reverted, match="epoch closed"):
        call(evm_signer, "closeEpoch", STUDIO, 1)
    with pytest.raises(Reverted, match="epoch closed"):
        call(evm_signer, "submitWork", STUDIO, 1, b"\x02" * 32, "e")
    # A retry of work that did land still reads "already submitted" after the close,
    # so a reconciler concludes COMPLETED rather than FAILED.
    with pytest.raises(Reverted, match="already submitted"):
        call(evm_signer, "submitWork", STUDIO, 1, DATA_HASH, "e")
    # Other studios and epochs are independent.
    assert call(evm_signer, "submitWork", STUDIO, 2, DATA_HASH, "e").kind == "confirmed"


def test_nonce_too_low_and_already_known(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    tx = evm_client.build_call(
        evm_contract, "submitWork", STUDIO, 1, DATA_HASH, "e", sender=evm_signer.address
    )
    signed = evm_signer.sign_transaction(tx)
    evm_client.send_raw(signed)
    # The same bytes again: py-evm says "nonce" but the client sees the hash is known.
    with pytest.raises(AlreadyKnown) as known:
        evm_client.send_raw(signed.raw_hex)
    assert known.value.tx_hash == signed.tx_hash
    # Different bytes with a used nonce.
    other = evm_client.build_call(
        evm_contract,
        "submitWork",
        STUDIO,
        1,
        b"\x09" * 32,
        "e",
        sender=evm_signer.address,
        nonce=0,
    )
    with pytest.raises(NonceTooLow):
        send(evm_client, evm_signer, other)


def test_insufficient_funds(evm_client: EthereumClient, evm_contract: Contract) -> None:
    poor = LocalSigner.from_private_key("0x" + "c3" * 32)
    tx = evm_client.build_call(
        evm_contract, "closeEpoch", STUDIO, 9, sender=poor.address, gas=100_000, nonce=0
    )
    with pytest.raises(InsufficientFunds):
        send(evm_client, poor, tx)


def test_never_broadcast_hash_is_not_found(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    tx = evm_client.build_call(evm_contract, "closeEpoch", STUDIO, 1, sender=evm_signer.address)
    signed = evm_signer.sign_transaction(tx)
    assert evm_client.receipt_status(signed.tx_hash) == TxStatus("not_found", signed.tx_hash)
    assert evm_client.is_pending(signed.tx_hash) is False


def test_snapshot_revert_makes_a_confirmed_receipt_disappear(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    tester = evm_client.w3.provider.ethereum_tester  # type: ignore[attr-defined]
    snapshot = tester.take_snapshot()
    tx_hash = submit_work(evm_client, evm_signer, evm_contract)
    assert evm_client.receipt_status(tx_hash).kind == "confirmed"
    tester.revert_to_snapshot(snapshot)
    assert evm_client.receipt_status(tx_hash).kind == "not_found"


def test_bump_fees_raises_both_fields_and_keeps_the_nonce(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    tx = evm_client.build_call(evm_contract, "closeEpoch", STUDIO, 1, sender=evm_signer.address)
    tx.update(maxFeePerGas=100 * 10**9, maxPriorityFeePerGas=10 * 10**9)
    bumped = evm_client.bump_fees(tx, factor=1.1)
    assert bumped["nonce"] == tx["nonce"]
    assert bumped["maxFeePerGas"] >= 110 * 10**9
    assert bumped["maxPriorityFeePerGas"] >= 11 * 10**9
    assert {k: v for k, v in bumped.items() if "Fee" not in k} == {
        k: v for k, v in tx.items() if "Fee" not in k
    }
    # Tiny fees: +10% rounds up, and the market price is a floor.
    tiny = evm_client.bump_fees({**tx, "maxFeePerGas": 5, "maxPriorityFeePerGas": 1})
    market = evm_client.suggest_fees()
    assert tiny["maxPriorityFeePerGas"] >= max(2, market.max_priority_fee_per_gas)
    assert tiny["maxFeePerGas"] >= max(6, market.max_fee_per_gas)
    with pytest.raises(InputError, match=r"factor must be >= 1.1"):
        evm_client.bump_fees(tx, factor=1.05)
    with pytest.raises(InputError, match="maxFeePerGas"):
        evm_client.bump_fees({"nonce": 1, "gasPrice": 10})


def test_bad_arguments_are_input_errors(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    with pytest.raises(InputError, match="cannot encode closeEpoch"):
        evm_client.build_call(
            evm_contract, "closeEpoch", "not-an-address", 1, sender=evm_signer.address
        )


def test_confirmations_must_be_positive(evm_client: EthereumClient) -> None:
    with pytest.raises(InputError, match="confirmations"):
        evm_client.receipt_status("0x" + "00" * 32, confirmations=0)
