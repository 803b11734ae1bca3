"""The Arweave adapter against a real arlocal: uploads of every awkward size, status,
funds, invalid transactions, idempotent re-posts and an unreachable gateway."""

from __future__ import annotations

import hashlib
import json
import logging
import random
import socket
import time
from pathlib import Path

import psutil
import pytest

from statemachine_wf.adapters.arweave import (
    ArLocalNode,
    ArweaveClient,
    ArweaveWallet,
    GatewayUnavailable,
    InsufficientFunds,
    InvalidTransaction,
    PreparedTx,
    start_arlocal,
)
from statemachine_wf.adapters.arweave.merkle import compute_data_root
from statemachine_wf.adapters.arweave.transaction import b64url_decode, b64url_encode
from statemachine_wf.adapters.arweave.wallet import WALLET_ENV_VAR

pytestmark = pytest.mark.chain

UNKNOWN_ID = "u" * 43
# A random size, fixed per run so a failure can be replayed from the test id.
RANDOM_SIZE = random.Random().randrange(2, 4 * 1024 * 1024)


def test_arlocal_listens_on_loopback_only_and_stops_by_pid() -> None:
    node = start_arlocal()
    workdir = node.workdir
    try:
        listening = [
            c
            for c in psutil.Process(node.pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        ]
        assert [(c.laddr.ip, c.laddr.port) for c in listening] == [("127.0.0.1", node.port)]
        assert node.url == f"http://127.0.0.1:{node.port}"
        # Its database lives in its own directory, not under the real ~/.arlocal.
        assert (workdir / "db" / "db.sqlite").is_file()
    finally:
        node.stop()
    assert not node.running
    assert not psutil.pid_exists(node.pid) or psutil.Process(node.pid).status() == "zombie"
    assert not workdir.exists()
    node.stop()  # idempotent


def test_two_nodes_get_two_ports() -> None:
    with start_arlocal() as a, start_arlocal() as b:
        assert a.port != b.port
        assert a.pid != b.pid


def test_mint_and_balance(arlocal: ArLocalNode, unfunded_arweave_wallet: ArweaveWallet) -> None:
    with ArweaveClient(arlocal.url, unfunded_arweave_wallet) as client:
        assert client.balance() == 0
        assert arlocal.mint(unfunded_arweave_wallet.address, 5000) == 5000
        assert client.balance() == 5000
        assert client.balance(unfunded_arweave_wallet.address) == 5000


@pytest.mark.parametrize(
    "size",
    [0, 1, 1000, 262144, 262144 + 1000, 524288, 3145728, RANDOM_SIZE],
    ids=lambda s: f"{s}B",
)
def test_round_trip(arlocal: ArLocalNode, arweave_client: ArweaveClient, size: int) -> None:
    data = random.Random(size).randbytes(size)
    balance_before = arweave_client.balance()
    result = arweave_client.upload(
        data, {"Content-Type": "application/octet-stream", "Size": str(size)}
    )
    assert result.size == size
    assert result.data_root == b64url_encode(compute_data_root(data))
    assert result.already_posted is False
    # The fee was charged: the post was not silently dropped.
    assert arweave_client.balance() < balance_before or size == 0
    assert arweave_client.status(result.tx_id).kind == "pending"

    arlocal.mine()
    first = arweave_client.status(result.tx_id)
    assert first.kind == "confirmed"
    assert first.block_height is not None
    assert first.block_hash
    arlocal.mine(3)
    later = arweave_client.status(result.tx_id)
    assert later.confirmations == first.confirmations + 3
    assert later.block_height == first.block_height

    assert arweave_client.get_data(result.tx_id) == data
    header = arweave_client.get_header(result.tx_id)
    assert header["data_root"] == result.data_root
    assert int(header["data_size"]) == size


@pytest.mark.parametrize("size", [1000, 262144, 524288, 600_000, 3145728], ids=lambda s: f"{s}B")
def test_chunked_round_trip(
    arlocal: ArLocalNode, funded_arweave_wallet: ArweaveWallet, size: int
) -> None:
    # Header without data, then POST /chunk with proofs: the path for data above
    # the inline limit. Random data: arlocal drops repeated identical chunks.
    data = random.Random(-size).randbytes(size)
    with ArweaveClient(arlocal.url, funded_arweave_wallet, inline_limit=0) as client:
        result = client.upload(data, {"Mode": "chunked"})
        assert client.status(result.tx_id).kind == "pending"
        arlocal.mine()
        assert client.status(result.tx_id).kind == "confirmed"
        assert client.get_data(result.tx_id) == data


def test_unknown_id_is_not_found(arweave_client: ArweaveClient) -> None:
    assert arweave_client.status(UNKNOWN_ID).kind == "not_found"
    assert arweave_client.status(UNKNOWN_ID).confirmations == 0


def test_unfunded_wallet_raises_insufficient_funds(
    arlocal: ArLocalNode, unfunded_arweave_wallet: ArweaveWallet
) -> None:
    with ArweaveClient(arlocal.url, unfunded_arweave_wallet) as client:
        prepared = client.prepare(b"evidence" * 100, {"k": "v"})
        with pytest.raises(InsufficientFunds) as info:
            client.post(prepared)
        assert info.value.retryable is True
        assert info.value.status_code == 410
        assert info.value.tx_id == prepared.tx_id
        assert client.status(prepared.tx_id).kind == "not_found"
        # Funding the wallet is the condition the workflow stalls on; the same
        # signed transaction then goes through.
        arlocal.mint(unfunded_arweave_wallet.address, 10**12)
        assert client.post(prepared).tx_id == prepared.tx_id
        assert client.status(prepared.tx_id).kind == "pending"


def test_tampered_data_is_invalid(arweave_client: ArweaveClient) -> None:
    prepared = arweave_client.prepare(b"the evidence", {"k": "v"})
    forged = PreparedTx(tx_id=prepared.tx_id, header=prepared.header, data=b"the evidenCe")
    with pytest.raises(InvalidTransaction) as info:
        arweave_client.post(forged)
    assert info.value.status_code == 400
    assert info.value.retryable is False
    assert arweave_client.status(prepared.tx_id).kind == "not_found"


def test_bad_signature_is_invalid(arweave_client: ArweaveClient) -> None:
    prepared = arweave_client.prepare(b"signed evidence", {"k": "v"})
    signature = bytearray(b64url_decode(prepared.header["signature"]))
    signature[10] ^= 0xFF
    # Keep id == sha256(signature) so that the signature check is what fails.
    bad_id = b64url_encode(hashlib.sha256(signature).digest())
    forged = PreparedTx(
        tx_id=bad_id,
        header={**prepared.header, "signature": b64url_encode(bytes(signature)), "id": bad_id},
        data=prepared.data,
    )
    with pytest.raises(InvalidTransaction) as info:
        arweave_client.post(forged)
    assert info.value.status_code == 400
    # A tag changed after signing is caught the same way.
    other_tags = [{"name": b64url_encode(b"k"), "value": b64url_encode(b"w")}]
    retagged = PreparedTx(prepared.tx_id, {**prepared.header, "tags": other_tags}, prepared.data)
    with pytest.raises(InvalidTransaction):
        arweave_client.post(retagged)
    # The untouched transaction still goes through.
    assert arweave_client.post(prepared).already_posted is False


def test_reposting_is_idempotent_and_charged_once(
    arlocal: ArLocalNode, arweave_client: ArweaveClient
) -> None:
    prepared = arweave_client.prepare(b"once" * 500, {"k": "v"})
    start = arweave_client.balance()
    assert arweave_client.post(prepared).already_posted is False
    after_first = arweave_client.balance()
    assert after_first == start - prepared.reward
    assert arweave_client.post(prepared).already_posted is True
    arlocal.mine()
    assert arweave_client.post(prepared).already_posted is True
    assert arweave_client.balance() == after_first
    assert arweave_client.status(prepared.tx_id).kind == "confirmed"


def test_reposting_after_funds_ran_out_is_still_success(
    arlocal: ArLocalNode, unfunded_arweave_wallet: ArweaveWallet
) -> None:
    # arlocal answers a duplicate from a now-empty wallet with 410; the tx exists.
    with ArweaveClient(arlocal.url, unfunded_arweave_wallet) as client:
        prepared = client.prepare(b"x" * 1000)
        arlocal.mint(unfunded_arweave_wallet.address, prepared.reward)
        assert client.post(prepared).already_posted is False
        assert client.balance() == 0
        assert client.post(prepared).already_posted is True


def test_crash_between_prepare_and_post_reposts_the_persisted_record(
    arlocal: ArLocalNode, arweave_client: ArweaveClient, tmp_path: Path
) -> None:
    data = random.Random(7).randbytes(300_000)
    prepared = arweave_client.prepare(data, {"Workflow-Id": "wf-1"})
    # What a durable step writes before posting: the id and the signed header.
    (tmp_path / "progress.json").write_text(
        json.dumps({"arweave_tx_id": prepared.tx_id, "arweave_tx": prepared.to_record()})
    )
    del prepared  # "crash"

    progress = json.loads((tmp_path / "progress.json").read_text())
    assert arweave_client.status(progress["arweave_tx_id"]).kind == "not_found"
    again = PreparedTx.from_record(progress["arweave_tx"], data)
    result = arweave_client.post(again)
    assert result.tx_id == progress["arweave_tx_id"]
    arlocal.mine()
    assert arweave_client.status(result.tx_id).confirmed
    assert arweave_client.get_data(result.tx_id) == data


def test_wallet_from_env_signs_for_the_client(
    arlocal: ArLocalNode,
    funded_arweave_wallet: ArweaveWallet,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "wallet.json"
    funded_arweave_wallet.save(path)
    monkeypatch.setenv(WALLET_ENV_VAR, str(path))
    with ArweaveClient(arlocal.url, ArweaveWallet.from_env()) as client:
        result = client.upload(b"from env")
        arlocal.mine()
        assert client.get_data(result.tx_id) == b"from env"


def test_no_key_material_in_logs_or_errors(
    arlocal: ArLocalNode,
    arweave_client: ArweaveClient,
    unfunded_arweave_wallet: ArweaveWallet,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    wallet = arweave_client.wallet
    assert wallet is not None
    texts = [repr(arweave_client), str(arweave_client.wallet)]
    result = arweave_client.upload(b"secret-free evidence", {"k": "v"})
    arlocal.mine()
    texts.append(repr(arweave_client.status(result.tx_id)))
    with ArweaveClient(arlocal.url, unfunded_arweave_wallet) as poor:
        with pytest.raises(InsufficientFunds) as info:
            poor.upload(b"x" * 10)
        texts += [str(info.value), repr(info.value)]
    prepared = arweave_client.prepare(b"abc")
    with pytest.raises(InvalidTransaction) as invalid:
        arweave_client.post(PreparedTx(prepared.tx_id, prepared.header, b"abd"))
    texts += [str(invalid.value), repr(invalid.value)]
    texts += [record.getMessage() for record in caplog.records]
    assert any("posted arweave tx" in t for t in texts)  # the logs were captured
    blob = "\n".join(texts)
    for who in (wallet, unfunded_arweave_wallet):
        jwk = who.export_jwk()
        for field in ("d", "p", "q", "dp", "dq", "qi"):
            assert jwk[field] not in blob
            assert jwk[field][:32] not in blob


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_closed_port_is_gateway_unavailable_quickly(arweave_wallet: ArweaveWallet) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    with ArweaveClient(url, arweave_wallet, timeout=5.0) as client:
        for call in (
            lambda: client.status(UNKNOWN_ID),
            lambda: client.upload(b"x"),
            client.balance,
        ):
            with pytest.raises(GatewayUnavailable) as info:
                call()
            assert info.value.retryable is True
            assert "ConnectError" in str(info.value)
    assert time.monotonic() - started < 2.0


def test_stopped_node_is_gateway_unavailable(arweave_wallet: ArweaveWallet) -> None:
    node = start_arlocal()
    url = node.url
    node.stop()
    with (
        ArweaveClient(url, arweave_wallet, timeout=5.0) as client,
        pytest.raises(GatewayUnavailable),
    ):
        client.status(UNKNOWN_ID)
