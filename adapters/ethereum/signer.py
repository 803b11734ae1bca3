"""Signers: who signs a transaction, without the private key ever leaving the object.

:class:`Signer` is the port the transaction queue depends on; :class:`LocalSigner` holds a
key in process memory (from an environment variable or an encrypted keystore file). A
remote signer (KMS, HSM, Clef) only has to implement :class:`Signer`.

The key never appears in ``repr``/``str``, in an exception message, or in a log record: a
signing failure is re-raised as :class:`SignerError` carrying the original exception's
type and a message with the key redacted, and without chaining the original (whose
message or arguments could echo what was being signed with).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_typing import ChecksumAddress

from .errors import SignerError

__all__ = ["LocalSigner", "SignedTx", "Signer"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SignedTx:
    """A signed transaction, ready for ``eth_sendRawTransaction``.

    Attributes:
        raw_hex: The RLP-encoded signed transaction, 0x-hex. Persist it before sending:
            re-sending the same bytes after a crash is idempotent (same hash).
        tx_hash: Its hash, 0x-hex (known before it is broadcast).
        nonce: The sender nonce it uses.
    """

    raw_hex: str
    tx_hash: str
    nonce: int

    @property
    def raw(self) -> bytes:
        """The raw transaction bytes."""
        return bytes.fromhex(self.raw_hex.removeprefix("0x"))


@runtime_checkable
class Signer(Protocol):
    """Signs transactions for one address."""

    @property
    def address(self) -> ChecksumAddress:
        """The checksummed address transactions are sent from."""
        ...

    def sign_transaction(self, tx: Mapping[str, Any]) -> SignedTx:
        """Sign a complete transaction dict (nonce, gas, fees and chainId set).

        Raises:
            SignerError: The transaction is incomplete or the signer failed.
        """
        ...


_HEX_KEY = re.compile(r"(?:0x)?[0-9a-fA-F]{64}")


class LocalSigner:
    """A signer holding a private key in memory.

    Build it with :meth:`from_env`, :meth:`from_keystore` or :meth:`from_private_key`;
    ``repr`` and ``str`` show only the address.
    """

    __slots__ = ("__account",)

    def __init__(self, account: LocalAccount) -> None:
        """Wrap an ``eth_account`` account; prefer the ``from_*`` constructors."""
        self.__account = account

    @classmethod
    def from_private_key(cls, private_key: str | bytes) -> LocalSigner:
        """Build a signer from a 32-byte private key (bytes or 0x-hex).

        Raises:
            SignerError: The key is not a valid secp256k1 private key.
        """
        try:
            account: LocalAccount = Account.from_key(private_key)
        except Exception as exc:
            # Not chained: some key parsers echo the input they were given.
            raise SignerError(f"invalid private key ({type(exc).__name__})") from None
        return cls(account)

    @classmethod
    def from_env(cls, var: str = "SWF_ETH_PRIVATE_KEY") -> LocalSigner:
        """Build a signer from a 0x-hex private key in an environment variable.

        Raises:
            SignerError: The variable is unset, empty or not a valid key.
        """
        value = os.environ.get(var, "").strip()
        if not value:
            raise SignerError(f"environment variable {var} is not set")
        try:
            return cls.from_private_key(value)
        except SignerError:
            raise SignerError(f"environment variable {var} does not hold a valid key") from None

    @classmethod
    def from_keystore(
        cls,
        path: str | os.PathLike[str],
        *,
        password_env: str = "SWF_ETH_KEYSTORE_PASSWORD",
    ) -> LocalSigner:
        """Build a signer from an encrypted JSON keystore (Web3 Secret Storage v3).

        Args:
            path: The keystore file.
            password_env: The environment variable holding its password.

        Raises:
            SignerError: The file is missing or malformed, the password variable is unset,
                or the password is wrong.
        """
        password = os.environ.get(password_env)
        if password is None:
            raise SignerError(f"environment variable {password_env} is not set")
        keystore = Path(path)
        try:
            keyfile = json.loads(keystore.read_text())
        except (OSError, ValueError) as exc:
            raise SignerError(f"cannot read keystore {keystore}: {type(exc).__name__}") from None
        try:
            key = Account.decrypt(keyfile, password)
        except Exception as exc:
            raise SignerError(
                f"cannot decrypt keystore {keystore} (wrong password in {password_env}?):"
                f" {type(exc).__name__}"
            ) from None
        return cls.from_private_key(bytes(key))

    @property
    def address(self) -> ChecksumAddress:
        """The checksummed address of the key."""
        return self.__account.address

    def sign_transaction(self, tx: Mapping[str, Any]) -> SignedTx:
        """Sign a complete transaction dict.

        Args:
            tx: Transaction fields (``nonce``, ``gas``, fee fields, ``chainId``, ``to``,
                ``data``, ``value``); ``from``, if present, must be this signer's address.

        Returns:
            The signed transaction.

        Raises:
            SignerError: ``from`` is another address, a field is missing or invalid.
        """
        fields = dict(tx)
        sender = fields.pop("from", None)
        if sender is not None and str(sender).lower() != self.address.lower():
            raise SignerError(f"transaction is from {sender}, this signer is {self.address}")
        try:
            signed = self.__account.sign_transaction(fields)
        except Exception as exc:
            message = f"{self.address} could not sign: {type(exc).__name__}: {self._redact(exc)}"
            logger.warning("%s", message)
            raise SignerError(message) from None
        return SignedTx(
            raw_hex=signed.raw_transaction.to_0x_hex(),
            tx_hash=signed.hash.to_0x_hex(),
            nonce=int(fields["nonce"]),
        )

    def _redact(self, exc: BaseException) -> str:
        # Belt and braces: remove the key (any spelling) and any 32-byte hex string that
        # could be it; a transaction dict never legitimately needs one in an error message.
        text = str(exc)
        key_hex = self.__account.key.hex().removeprefix("0x")
        text = re.sub(re.escape(key_hex), "<redacted>", text, flags=re.IGNORECASE)
        return _HEX_KEY.sub("<redacted>", text)[:300]

    def __repr__(self) -> str:
        return f"LocalSigner(address={self.address!r})"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        # Pickling would write the key to wherever the pickle goes (a queue, a DB row).
        raise TypeError("LocalSigner cannot be pickled; it holds a private key")
