"""Building and signing v2 transactions, and the persisted record of a prepared one."""

from __future__ import annotations

import hashlib
import json

import pytest
from Crypto.Hash import SHA256
from Crypto.PublicKey import RSA
from Crypto.Signature import pss

from statemachine_wf.adapters.arweave import (
    ArweaveWallet,
    InvalidTransaction,
    PreparedTx,
    build_transaction,
)
from statemachine_wf.adapters.arweave.merkle import compute_data_root
from statemachine_wf.adapters.arweave.transaction import (
    MAX_TAGS_BYTES,
    b64url_decode,
    b64url_encode,
)

ANCHOR = b64url_encode(bytes(range(48)))


@pytest.fixture(scope="module")
def wallet() -> ArweaveWallet:
    return ArweaveWallet.generate()


def deep_hash(item: bytes | list[object]) -> bytes:
    """The Arweave deep-hash, from the spec, apart from the library under use."""

    def sha384(data: bytes) -> bytes:
        return hashlib.sha384(data).digest()

    if isinstance(item, list):
        acc = sha384(b"list" + str(len(item)).encode())
        for child in item:
            assert isinstance(child, bytes | list)
            acc = sha384(acc + deep_hash(child))
        return acc
    return sha384(sha384(b"blob" + str(len(item)).encode()) + sha384(item))


def verify(wallet: ArweaveWallet, tx: PreparedTx) -> None:
    h = tx.header
    message = deep_hash(
        [
            b"2",
            b64url_decode(h["owner"]),
            b64url_decode(h["target"]),
            h["quantity"].encode(),
            h["reward"].encode(),
            b64url_decode(h["last_tx"]),
            [[b64url_decode(t["name"]), b64url_decode(t["value"])] for t in h["tags"]],
            h["data_size"].encode(),
            b64url_decode(h["data_root"]),
        ]
    )
    public = RSA.construct((int.from_bytes(b64url_decode(wallet.owner), "big"), 65537))
    pss.new(public).verify(SHA256.new(message), b64url_decode(h["signature"]))


@pytest.mark.parametrize("size", [0, 1, 262144, 300_000])
def test_signed_header_is_consistent(wallet: ArweaveWallet, size: int) -> None:
    data = bytes(size)
    tx = build_transaction(
        wallet, data, {"Content-Type": "text/plain", "Név": "értéke"}, anchor=ANCHOR, reward=123
    )
    h = tx.header
    assert h["format"] == 2
    assert (
        tx.tx_id == h["id"] == b64url_encode(hashlib.sha256(b64url_decode(h["signature"])).digest())
    )
    assert h["owner"] == wallet.owner
    assert h["last_tx"] == ANCHOR
    assert (h["reward"], h["quantity"], h["target"]) == ("123", "0", "")
    assert tx.data_size == size
    assert h["data_size"] == str(size)
    assert tx.data_root == b64url_encode(compute_data_root(data))
    assert (tx.data_root == "") == (size == 0)
    # Tags are UTF-8, base64url, in order.
    assert [
        (b64url_decode(t["name"]).decode(), b64url_decode(t["value"]).decode()) for t in h["tags"]
    ] == [
        ("Content-Type", "text/plain"),
        ("Név", "értéke"),
    ]
    verify(wallet, tx)


def test_signing_twice_gives_two_ids(wallet: ArweaveWallet) -> None:
    # RSA-PSS is randomised: this is why a durable step persists the record.
    a = build_transaction(wallet, b"x", anchor=ANCHOR, reward=1)
    b = build_transaction(wallet, b"x", anchor=ANCHOR, reward=1)
    assert a.tx_id != b.tx_id
    assert a.data_root == b.data_root


def test_body_inline_or_not_and_reading_it_twice_is_stable(wallet: ArweaveWallet) -> None:
    tx = build_transaction(wallet, b"hello", {"a": "b"}, anchor=ANCHOR, reward=1)
    first, second = tx.body(inline=True), tx.body(inline=True)
    assert first == second  # no double encoding on a second read
    assert first["data"] == b64url_encode(b"hello")
    assert tx.body(inline=False)["data"] == ""
    first["tags"][0]["name"] = "mutated"
    assert tx.body(inline=True)["tags"][0]["name"] == b64url_encode(b"a")


def test_record_round_trips_through_json(wallet: ArweaveWallet) -> None:
    data = b"evidence" * 1000
    tx = build_transaction(wallet, data, {"k": "v"}, anchor=ANCHOR, reward=5)
    record = json.loads(json.dumps(tx.to_record()))
    assert "data" not in record or record["data"] == ""
    again = PreparedTx.from_record(record, data)
    assert again.tx_id == tx.tx_id
    assert again.body(inline=True) == tx.body(inline=True)


def test_record_rejects_other_data_or_forged_id(wallet: ArweaveWallet) -> None:
    tx = build_transaction(wallet, b"original", anchor=ANCHOR, reward=5)
    record = tx.to_record()
    with pytest.raises(InvalidTransaction, match="does not match"):
        PreparedTx.from_record(record, b"0riginal")
    with pytest.raises(InvalidTransaction, match="hash of its signature"):
        PreparedTx.from_record({**record, "id": "A" * 43}, b"original")
    with pytest.raises(InvalidTransaction, match="not a prepared transaction record"):
        PreparedTx.from_record({"id": tx.tx_id}, b"original")


@pytest.mark.parametrize(
    ("tags", "match"),
    [
        ({"": "v"}, "non-empty"),
        ({"k": ""}, "non-empty"),
        ({"k": 1}, "must be str"),
        ({"k": "v" * MAX_TAGS_BYTES}, "limit is 2048"),
    ],
)
def test_bad_tags_are_refused_before_signing(
    wallet: ArweaveWallet, tags: dict[str, str], match: str
) -> None:
    with pytest.raises(InvalidTransaction, match=match) as info:
        build_transaction(wallet, b"x", tags, anchor=ANCHOR, reward=1)
    assert info.value.retryable is False
