"""Reconcilers and the transaction queue on the in-process EVM (py-evm): no node needed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import httpx
import pytest
from eth_utils.address import to_checksum_address
from pydantic import BaseModel
from web3.contract import Contract

from examples.chaoschain.views import epoch_closed, work_evidence, work_submitted
from statemachine_wf.adapters.arweave import ArweaveClient
from statemachine_wf.adapters.ethereum import EthereumClient, LocalSigner
from statemachine_wf.adapters.ethereum.txqueue import (
    RESEND_SLOTS,
    QueueSettings,
    TxQueue,
    TxQueueProgress,
    TxRecord,
    tx_records,
)
from statemachine_wf.errors import Snooze, Stall, Waiting
from statemachine_wf.reconcilers.arweave import upload_fate
from statemachine_wf.reconcilers.ethereum import nonce_used, signer_nonce, tx_fate
from statemachine_wf.runtime.context import StepContext

STUDIO = to_checksum_address("0x00000000000000000000000000000000000057d1")
DATA_HASH = "0x" + "01" * 32
# The in-process chain mines one block per transaction and nothing else: the tests that
# wait for a mined transaction to be final ask for depth 1 (the default is 2).
DEPTH_1 = QueueSettings(confirmations=1)


def mine(client: EthereumClient, blocks: int) -> None:
    client.w3.provider.ethereum_tester.mine_blocks(blocks)  # type: ignore[attr-defined]


class In(BaseModel):
    pass


class Progress(TxQueueProgress):
    pass


class FakeHost:
    """The runner's side of a StepContext, in memory: progress saves and locks."""

    def __init__(self, instance_id: str, locks: dict[str, str]) -> None:
        self.instance_id = instance_id
        self.locks = locks
        self.saved: dict[str, Any] = {}
        self.reserved: dict[str, str] = {}

    def save_progress(self, delta: Mapping[str, Any]) -> None:
        self.saved.update(delta)

    def heartbeat(self) -> None:
        pass

    def cancel_requested(self) -> bool:
        return False

    def acquire(self, key: str) -> str:
        return self.locks.setdefault(key, self.instance_id)

    def release(self, key: str) -> bool:
        if self.locks.get(key) == self.instance_id:
            del self.locks[key]
            return True
        return False

    def reserve_token(self, key: str, token: str) -> None:
        self.reserved[key] = token  # StepHost's; no test here takes a wait token

    def waker(self) -> Callable[[], None]:
        return lambda: None  # nothing here sleeps: each test calls the step again itself


def make_ctx(
    progress: Mapping[str, Any] | None = None,
    *,
    instance_id: str = "i-1",
    locks: dict[str, str] | None = None,
) -> tuple[StepContext[In, Progress], FakeHost]:
    host = FakeHost(instance_id, {} if locks is None else locks)
    ctx: StepContext[In, Progress] = StepContext(
        instance_id=instance_id,
        workflow_type="t.q.v1",
        step="S",
        attempt=1,
        input=In(),
        progress=dict(progress or {}),
        progress_model=Progress,
        host=host,
    )
    return ctx, host


def builder(
    client: EthereumClient, contract: Contract, signer: LocalSigner, data_hash: str
) -> Callable[[int], dict[str, Any]]:
    def build(nonce: int) -> dict[str, Any]:
        return client.build_call(
            contract,
            "submitWork",
            STUDIO,
            1,
            bytes.fromhex(data_hash[2:]),
            "ev",
            sender=signer.address,
            nonce=nonce,
        )

    return build


def test_submit_records_before_sending_and_await_confirms(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    queue = TxQueue(evm_client, evm_signer, QueueSettings(confirmations=1))
    ctx, host = make_ctx()
    start = evm_client.nonce(evm_signer.address)
    record = queue.submit(ctx, builder(evm_client, evm_contract, evm_signer, DATA_HASH))
    assert record.nonce == start
    assert host.saved["tx_1"]["tx_hash"] == record.tx_hash
    assert host.locks == {queue.key: "i-1"}
    verdict = queue.await_final(ctx)
    assert verdict.kind == "confirmed"
    assert verdict.tx_hash == record.tx_hash
    assert work_submitted(evm_client, evm_contract, STUDIO, 1, DATA_HASH, confirmations=1)
    evidence = work_evidence(evm_client, evm_contract, STUDIO, 1, DATA_HASH, confirmations=1)
    assert evidence == (evm_signer.address, "ev")
    # Submitting again with the record in progress sends nothing.
    again = queue.submit(ctx, builder(evm_client, evm_contract, evm_signer, DATA_HASH))
    assert again.tx_hash == record.tx_hash
    assert evm_client.nonce(evm_signer.address) == start + 1
    assert queue.release(ctx)
    assert host.locks == {}


def test_slot_held_by_another_instance_parks_the_step(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    queue = TxQueue(evm_client, evm_signer)
    locks: dict[str, str] = {queue.key: "someone-else"}
    ctx, host = make_ctx(locks=locks)
    with pytest.raises(Waiting):
        queue.submit(ctx, builder(evm_client, evm_contract, evm_signer, DATA_HASH))
    assert host.saved == {}


def test_crash_before_broadcast_resends_the_recorded_bytes(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    build = builder(evm_client, evm_contract, evm_signer, DATA_HASH)
    nonce = evm_client.nonce(evm_signer.address)
    tx = build(nonce)
    signed = evm_signer.sign_transaction(tx)
    record = TxRecord.of(tx, signed, signed_at=0.0)  # recorded, never broadcast
    queue = TxQueue(evm_client, evm_signer, DEPTH_1)
    ctx, _ = make_ctx({"tx_1": record.model_dump()})
    assert queue.fate(ctx.progress).kind == "not_found"
    sent = queue.submit(ctx, build)
    assert sent.tx_hash == record.tx_hash  # the same bytes, not a new transaction
    assert queue.await_final(ctx).kind == "confirmed"
    assert evm_client.nonce(evm_signer.address) == nonce + 1


def test_nonce_used_by_another_tx_is_superseded_and_resigned(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    build = builder(evm_client, evm_contract, evm_signer, DATA_HASH)
    nonce = evm_client.nonce(evm_signer.address)
    tx = build(nonce)
    record = TxRecord.of(tx, evm_signer.sign_transaction(tx), signed_at=0.0)
    # Another path uses the nonce first (a plain transfer from the same signer).
    other = evm_client.build_transaction(
        sender=evm_signer.address, to=STUDIO, data="0x", value=1, nonce=nonce
    )
    evm_client.send_raw(evm_signer.sign_transaction(other))
    assert nonce_used(evm_client, evm_signer.address, nonce)
    verdict = tx_fate(evm_client, [record], sender=evm_signer.address)
    assert verdict.kind == "superseded"
    assert verdict.evidence()["chain_nonce"] == nonce + 1
    queue = TxQueue(evm_client, evm_signer, DEPTH_1)
    ctx, host = make_ctx({"tx_1": record.model_dump()})
    fresh = queue.submit(ctx, build)
    assert fresh.nonce == nonce + 1
    assert host.saved["tx_2"]["tx_hash"] == fresh.tx_hash
    assert queue.await_final(ctx).kind == "confirmed"
    assert [r.nonce for r in tx_records(ctx.progress)] == [nonce, nonce + 1]


def test_every_hash_is_checked_and_a_mined_one_wins(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    build = builder(evm_client, evm_contract, evm_signer, DATA_HASH)
    nonce = evm_client.nonce(evm_signer.address)
    tx = build(nonce)
    replaced = TxRecord.of(tx, evm_signer.sign_transaction(tx), signed_at=0.0)
    bumped_tx = evm_client.bump_fees(tx)
    bumped = TxRecord.of(bumped_tx, evm_signer.sign_transaction(bumped_tx), signed_at=1.0)
    evm_client.send_raw(bumped.raw_hex)  # only the replacement ever reaches the chain
    verdict = tx_fate(evm_client, [replaced, bumped], sender=evm_signer.address)
    assert verdict.kind == "confirmed"
    assert verdict.tx_hash == bumped.tx_hash
    assert verdict.evidence()["hashes_checked"] == {
        replaced.tx_hash: "not_found",
        bumped.tx_hash: "confirmed",
    }


def test_depth_rule_for_receipts_and_views(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    queue = TxQueue(evm_client, evm_signer, QueueSettings(confirmations=3, poll_interval=0.01))
    ctx, _ = make_ctx()
    queue.submit(ctx, builder(evm_client, evm_contract, evm_signer, DATA_HASH))
    with pytest.raises(Snooze, match="mined in"):
        queue.await_final(ctx)
    assert not work_submitted(evm_client, evm_contract, STUDIO, 1, DATA_HASH, confirmations=3)
    assert work_submitted(evm_client, evm_contract, STUDIO, 1, DATA_HASH, confirmations=1)
    mine(evm_client, 2)
    assert queue.await_final(ctx).kind == "confirmed"
    assert work_submitted(evm_client, evm_contract, STUDIO, 1, DATA_HASH, confirmations=3)
    assert not epoch_closed(evm_client, evm_contract, STUDIO, 1)


def test_reverted_with_reason(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    queue = TxQueue(evm_client, evm_signer, DEPTH_1)
    first, _ = make_ctx()
    queue.submit(first, builder(evm_client, evm_contract, evm_signer, DATA_HASH))
    assert queue.await_final(first).kind == "confirmed"
    # A second submission with a fixed gas limit (no estimation, which would see the
    # revert first) is mined and reverts.
    data = evm_contract.encode_abi(
        "submitWork", args=[STUDIO, 1, bytes.fromhex(DATA_HASH[2:]), "ev"]
    )

    def no_estimate(nonce: int) -> dict[str, Any]:
        return evm_client.build_transaction(
            sender=evm_signer.address, to=evm_contract.address, data=data, nonce=nonce, gas=200_000
        )

    second, _ = make_ctx(instance_id="i-2")
    queue.release(first)
    queue.submit(second, no_estimate)
    verdict = queue.await_final(second)
    assert verdict.kind == "reverted"
    assert verdict.revert_reason == "already submitted"
    state = signer_nonce(evm_client, evm_signer.address)
    assert state.in_pool == 0
    assert state.latest >= 2


def test_arweave_upload_fate() -> None:
    tx_id = "A" * 43
    answers = {
        f"/tx/{tx_id}/status": httpx.Response(
            200,
            json={"block_height": 7, "block_indep_hash": "h", "number_of_confirmations": 2},
        ),
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return answers.get(request.url.path, httpx.Response(404, text="Not Found"))

    with ArweaveClient("http://gw", transport=httpx.MockTransport(handler)) as client:
        confirmed = upload_fate(client, tx_id)
        assert confirmed.kind == "confirmed"
        assert confirmed.exists
        assert confirmed.evidence()["arweave_block_height"] == 7
        assert upload_fate(client, tx_id, confirmations=5).kind == "pending"
        answers[f"/tx/{tx_id}/status"] = httpx.Response(200, text="Pending")
        assert upload_fate(client, tx_id).kind == "pending"
        del answers[f"/tx/{tx_id}/status"]
        missing = upload_fate(client, tx_id)
        assert missing.kind == "not_found"
        assert not missing.exists


def _unsent(
    client: EthereumClient, contract: Contract, signer: LocalSigner
) -> tuple[TxRecord, Callable[[int], dict[str, Any]]]:
    """A transaction recorded and never broadcast: the node does not know it."""
    build = builder(client, contract, signer, DATA_HASH)
    tx = build(client.nonce(signer.address))
    return TxRecord.of(tx, signer.sign_transaction(tx), signed_at=0.0), build


def test_rebroadcasts_are_recorded_then_bounded_by_a_stall(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    record, build = _unsent(evm_client, evm_contract, evm_signer)
    nonce = evm_client.nonce(evm_signer.address)
    lost_before = {f"resent_{n}": {"tx_hash": record.tx_hash, "at": float(n)} for n in (1, 2, 3)}
    other = {"resent_4": {"tx_hash": "0x" + "ab" * 32, "at": 4.0}}  # another hash: not counted
    queue = TxQueue(evm_client, evm_signer, DEPTH_1)
    ctx, host = make_ctx({"tx_1": record.model_dump(), **lost_before, **other})
    with pytest.raises(Stall) as stalled:
        queue.submit(ctx, build)
    assert stalled.value.code == "tx_dropped"
    assert record.tx_hash in str(stalled.value)
    assert "3 re-broadcast" in str(stalled.value)
    assert host.saved == {}  # nothing recorded, nothing sent
    assert evm_client.nonce(evm_signer.address) == nonce

    # Under the bound the re-broadcast is recorded (write-ahead), then sent.
    fewer = {k: v for k, v in lost_before.items() if k != "resent_3"}
    ctx, host = make_ctx({"tx_1": record.model_dump(), **fewer, **other})
    assert queue.submit(ctx, build).tx_hash == record.tx_hash
    assert host.saved["resent_3"]["tx_hash"] == record.tx_hash
    assert queue.await_final(ctx).kind == "confirmed"


def test_max_rebroadcasts_zero_never_resends_and_the_setting_is_checked(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    record, build = _unsent(evm_client, evm_contract, evm_signer)
    queue = TxQueue(evm_client, evm_signer, QueueSettings(confirmations=1, max_rebroadcasts=0))
    ctx, host = make_ctx({"tx_1": record.model_dump()})
    with pytest.raises(Stall, match="0 re-broadcast"):
        queue.submit(ctx, build)
    assert host.saved == {}
    for bad in (-1, len(RESEND_SLOTS) + 1):
        with pytest.raises(ValueError, match="max_rebroadcasts"):
            QueueSettings(max_rebroadcasts=bad)


def test_every_resend_slot_used_stalls_even_under_the_bound(
    evm_client: EthereumClient, evm_signer: LocalSigner, evm_contract: Contract
) -> None:
    record, build = _unsent(evm_client, evm_contract, evm_signer)
    full = {name: {"tx_hash": "0x" + "cd" * 32, "at": 1.0} for name in RESEND_SLOTS}
    queue = TxQueue(evm_client, evm_signer, DEPTH_1)
    ctx, _ = make_ctx({"tx_1": record.model_dump(), **full})
    with pytest.raises(Stall) as stalled:
        queue.submit(ctx, build)
    assert stalled.value.code == "tx_dropped"
