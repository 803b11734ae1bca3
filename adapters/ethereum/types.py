"""Validated input types for on-chain workflows: addresses and 32-byte hashes.

Use them in a workflow's input model so that malformed input is refused before anything
is written::

    class PayInput(BaseModel):
        recipient: Address      # checksummed; a mixed-case typo is refused
        ref: Bytes32            # 0x + 64 hex digits, lowercased
"""

from __future__ import annotations

import re
from typing import Annotated

from eth_utils.address import is_checksum_address, to_checksum_address
from eth_utils.crypto import keccak
from pydantic import AfterValidator

__all__ = ["Address", "Bytes32", "b32", "keccak_hex"]

_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
_BYTES32 = re.compile(r"^0x[0-9a-fA-F]{64}$")


def _address(value: str) -> str:
    if not _ADDRESS.match(value):
        raise ValueError("not an address: 0x followed by 40 hex digits expected")
    digits = value[2:]
    # Mixed case is an EIP-55 checksum: a typo in it must not pass as another address.
    if digits != digits.lower() and digits != digits.upper() and not is_checksum_address(value):
        raise ValueError("address has a wrong EIP-55 checksum (mixed case)")
    if int(digits, 16) == 0:
        raise ValueError("the zero address is not allowed")
    return str(to_checksum_address(value))


def _bytes32(value: str) -> str:
    if not _BYTES32.match(value):
        raise ValueError("not a 32-byte hash: 0x followed by 64 hex digits expected")
    return value.lower()


Address = Annotated[str, AfterValidator(_address)]
"""A non-zero address, returned checksummed (EIP-55); a wrong mixed-case checksum fails."""

Bytes32 = Annotated[str, AfterValidator(_bytes32)]
"""32 bytes as 0x-hex (lowercased)."""


def b32(value: str | bytes) -> bytes:
    """32 bytes from 0x-hex (or bytes), for a ``bytes32`` argument."""
    raw = bytes.fromhex(value.removeprefix("0x")) if isinstance(value, str) else bytes(value)
    if len(raw) != 32:
        raise ValueError(f"expected 32 bytes, got {len(raw)}")
    return raw


def keccak_hex(text: str | bytes) -> str:
    """keccak-256 of ``text`` (UTF-8 if a string), 0x-hex."""
    return "0x" + keccak(text.encode() if isinstance(text, str) else text).hex()
