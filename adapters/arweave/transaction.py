"""Building and signing Arweave v2 transactions (pure, no I/O).

The signed header is plain JSON built here, once, from our own values: the
arweave-python-client ``Transaction`` is not used because it fetches the anchor
and price in its constructor with no timeout, computes a wrong ``data_root`` for
some sizes and double-encodes the tags when ``json_data`` is read twice.
Only its ``deep_hash`` (correct) and, through the wallet, its RSA-PSS signer are used.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from statemachine_wf.adapters.arweave.errors import InvalidTransaction
from statemachine_wf.adapters.arweave.merkle import TransactionChunks, generate_transaction_chunks
from statemachine_wf.adapters.arweave.wallet import ArweaveWallet

__all__ = [
    "MAX_TAGS_BYTES",
    "PreparedTx",
    "b64url_decode",
    "b64url_encode",
    "build_transaction",
    "is_tx_id",
]

# The protocol caps the encoded size of all tag names and values together.
MAX_TAGS_BYTES = 2048

_TX_ID = re.compile(r"^[A-Za-z0-9_-]{43}$")


def b64url_encode(raw: bytes) -> str:
    """Base64url without padding, as every Arweave field is encoded."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Inverse of :func:`b64url_encode` (padding optional)."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def is_tx_id(value: str) -> bool:
    """Whether ``value`` has the shape of a transaction id (43 base64url characters)."""
    return bool(_TX_ID.match(value))


@dataclass(frozen=True)
class PreparedTx:
    """A signed transaction, not yet posted.

    Signing fixes ``tx_id`` (the SHA-256 of the signature) and RSA-PSS signatures are
    randomised: preparing the same data twice yields two different ids. A durable
    step therefore persists :meth:`to_record` *before* posting and, after a crash,
    re-posts that record (:meth:`from_record`) instead of preparing again.

    Attributes:
        tx_id: the transaction id.
        header: the signed JSON body without the data (``"data": ""``).
        data: the data bytes.
    """

    tx_id: str
    header: Mapping[str, Any]
    data: bytes = field(repr=False)

    @property
    def data_root(self) -> str:
        """The base64url ``data_root`` (``""`` for empty data)."""
        return str(self.header["data_root"])

    @property
    def data_size(self) -> int:
        """The data size in bytes."""
        return int(self.header["data_size"])

    @property
    def reward(self) -> int:
        """The fee in winston."""
        return int(self.header["reward"])

    def chunks(self) -> TransactionChunks:
        """The chunks and proofs to ``POST /chunk`` (recomputed from the data)."""
        return generate_transaction_chunks(self.data)

    def body(self, *, inline: bool) -> dict[str, Any]:
        """The JSON to ``POST /tx``, with the data inline or left to ``POST /chunk``."""
        body = dict(self.header)
        body["tags"] = [dict(t) for t in self.header["tags"]]
        body["data"] = b64url_encode(self.data) if inline else ""
        return body

    def to_record(self) -> dict[str, Any]:
        """The signed header as JSON-ready values: persist it before posting.

        It holds public values only (the owner is the public modulus) and is all
        that is needed, with the data, to post the very same transaction again.
        """
        return self.body(inline=False)

    @classmethod
    def from_record(cls, record: Mapping[str, Any], data: bytes) -> PreparedTx:
        """Rebuild a prepared transaction from :meth:`to_record` and its data.

        Raises:
            InvalidTransaction: the record is malformed or the data does not match
                its ``data_root``/``data_size``.
        """
        try:
            tx_id = str(record["id"])
            size = int(record["data_size"])
            root = str(record["data_root"])
            signature = b64url_decode(str(record["signature"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidTransaction(f"not a prepared transaction record: {exc!r}") from None
        if b64url_encode(hashlib.sha256(signature).digest()) != tx_id:
            raise InvalidTransaction(
                "the record's id is not the hash of its signature", tx_id=tx_id
            )
        if size != len(data) or b64url_encode(generate_transaction_chunks(data).data_root) != root:
            raise InvalidTransaction(
                f"the data ({len(data)} bytes) does not match the record's data_root/data_size",
                tx_id=tx_id,
            )
        header = {k: v for k, v in record.items() if k != "data"}
        return cls(tx_id=tx_id, header=header, data=data)


def _encode_tags(tags: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    encoded: list[tuple[bytes, bytes]] = []
    total = 0
    for name, value in tags.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidTransaction(f"tag {name!r}: names and values must be str")
        if not name or not value:
            # Gateways (and arlocal) reject a tag whose name or value is empty.
            raise InvalidTransaction(f"tag {name!r}: name and value must be non-empty")
        # UTF-8, not the ASCII arweave-python-client insists on: the protocol
        # carries bytes, and gateways decode them as UTF-8.
        raw = (name.encode("utf-8"), value.encode("utf-8"))
        total += len(raw[0]) + len(raw[1])
        encoded.append(raw)
    if total > MAX_TAGS_BYTES:
        raise InvalidTransaction(f"tags take {total} bytes; the limit is {MAX_TAGS_BYTES}")
    return encoded


def build_transaction(
    wallet: ArweaveWallet,
    data: bytes,
    tags: Mapping[str, str] | None = None,
    *,
    anchor: str,
    reward: int,
) -> PreparedTx:
    """Build and sign a v2 data transaction.

    Args:
        wallet: the signer, which pays ``reward``.
        data: the data to store.
        tags: tag names to values (UTF-8, at most 2048 bytes in all).
        anchor: ``last_tx``: a recent block hash from ``GET /tx_anchor``.
        reward: the fee in winston, from ``GET /price/<size>``.

    Returns:
        The signed transaction.

    Raises:
        InvalidTransaction: a tag is empty, not a str, or the tags are too large.
    """
    from arweave.deep_hash import deep_hash

    tag_list = _encode_tags(tags or {})
    data_root = generate_transaction_chunks(data).data_root
    owner, target, quantity = wallet.owner, "", "0"
    signature_data = deep_hash(
        [
            b"2",
            b64url_decode(owner),
            b64url_decode(target),
            quantity.encode(),
            str(reward).encode(),
            b64url_decode(anchor),
            [[name, value] for name, value in tag_list],
            str(len(data)).encode(),
            data_root,
        ]
    )
    signature = wallet.sign(signature_data)
    tx_id = b64url_encode(hashlib.sha256(signature).digest())
    header: dict[str, Any] = {
        "format": 2,
        "id": tx_id,
        "last_tx": anchor,
        "owner": owner,
        "tags": [{"name": b64url_encode(n), "value": b64url_encode(v)} for n, v in tag_list],
        "target": target,
        "quantity": quantity,
        "data_root": b64url_encode(data_root),
        "data_size": str(len(data)),
        "reward": str(reward),
        "signature": b64url_encode(signature),
    }
    return PreparedTx(tx_id=tx_id, header=header, data=bytes(data))
