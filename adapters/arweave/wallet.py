"""Arweave JWK wallets that keep their private key out of reprs, errors and logs.

Signing (RSA-PSS, SHA-256, 32-byte salt) is done by arweave-python-client's
``Wallet``, which is correct; everything else it does over the network is not used.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from statemachine_wf.adapters.arweave.errors import WalletError

__all__ = ["WALLET_ENV_VAR", "ArweaveWallet"]

WALLET_ENV_VAR = "SWF_ARWEAVE_WALLET"

_PRIVATE_FIELDS = ("d", "p", "q", "dp", "dq", "qi")


def _b64url(value: int) -> str:
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class ArweaveWallet:
    """An RSA wallet loaded from a JWK.

    ``repr()`` and ``str()`` show the address only, the object refuses to be
    pickled, and every loading error is raised without its cause chained (a JSON
    or key-parsing error can carry the document it failed on).

    Attributes:
        address: the wallet address (base64url SHA-256 of the public modulus).
        owner: the public modulus ``n``, base64url, as sent in a transaction.
    """

    __slots__ = ("_jwk", "_signer", "address", "owner")

    def __init__(self, jwk: Mapping[str, Any]) -> None:
        """Load a wallet from a parsed JWK.

        Args:
            jwk: the JSON Web Key, with ``kty == "RSA"`` and the private fields.

        Raises:
            WalletError: the mapping is not a private RSA JWK.
        """
        from arweave.arweave_lib import Wallet

        if not isinstance(jwk, Mapping) or jwk.get("kty") != "RSA":
            raise WalletError("the wallet is not an RSA JWK (kty must be 'RSA')")
        missing = [f for f in ("n", "e", *_PRIVATE_FIELDS) if not jwk.get(f)]
        if missing:
            raise WalletError(f"the wallet JWK lacks the field(s) {', '.join(missing)}")
        data = {k: v for k, v in jwk.items() if isinstance(k, str)}
        signer: Any = None
        # Raised outside any handler so that no __context__ keeps the parser's
        # exception, whose message may quote the key.
        with contextlib.suppress(Exception):
            # from_data mutates the dict it is given (adds 'p2s'): hand it a copy.
            signer = Wallet.from_data(dict(data))
        if signer is None:
            raise WalletError("the wallet JWK is not a valid RSA private key")
        self._jwk: dict[str, Any] = data
        self._signer: Any = signer
        self.owner: str = str(data["n"])
        self.address: str = str(signer.address)

    @classmethod
    def from_json(cls, text: str | bytes) -> ArweaveWallet:
        """Load a wallet from the JSON text of a JWK.

        Raises:
            WalletError: the text is not JSON or not a private RSA JWK.
        """
        jwk: Any = None
        # JSONDecodeError.doc is the whole document: never chain it (see __init__).
        with contextlib.suppress(ValueError):
            jwk = json.loads(text)
        if jwk is None:
            raise WalletError("the wallet is not valid JSON")
        if not isinstance(jwk, dict):
            raise WalletError("the wallet JSON is not an object")
        return cls(jwk)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ArweaveWallet:
        """Load a wallet from a JWK file (the format arweave.app and arweave-js export).

        Raises:
            WalletError: the file cannot be read or does not hold a private RSA JWK.
        """
        text: bytes | None = None
        problem = ""
        try:
            text = Path(path).read_bytes()
        except OSError as exc:
            problem = exc.strerror or type(exc).__name__
        if text is None:
            raise WalletError(f"cannot read the wallet file {_describe_path(path)}: {problem}")
        return cls.from_json(text)

    @classmethod
    def from_env(cls, var: str = WALLET_ENV_VAR) -> ArweaveWallet:
        """Load a wallet from an environment variable holding JWK JSON or a file path.

        Args:
            var: the variable name, ``SWF_ARWEAVE_WALLET`` by default.

        Raises:
            WalletError: the variable is unset or empty, or its wallet cannot be loaded.
        """
        value = os.environ.get(var, "").strip()
        if not value:
            raise WalletError(f"{var} is not set (JWK JSON or the path of a JWK file)")
        # Anything JSON-looking is parsed, never echoed back as a "path" in an error.
        if value[0] in '{["':
            return cls.from_json(value)
        return cls.from_file(value)

    @classmethod
    def generate(cls, bits: int = 4096) -> ArweaveWallet:
        """Create a new random wallet (Arweave uses 4096-bit keys, e = 65537).

        Args:
            bits: the RSA modulus size; 4096 takes a few seconds.
        """
        from Crypto.PublicKey import RSA

        key = RSA.generate(bits, e=65537)
        n, e, d, p, q = int(key.n), int(key.e), int(key.d), int(key.p), int(key.q)
        return cls(
            {
                "kty": "RSA",
                "n": _b64url(n),
                "e": _b64url(e),
                "d": _b64url(d),
                "p": _b64url(p),
                "q": _b64url(q),
                "dp": _b64url(d % (p - 1)),
                "dq": _b64url(d % (q - 1)),
                "qi": _b64url(pow(q, -1, p)),
            }
        )

    def sign(self, message: bytes) -> bytes:
        """Sign ``message`` with RSA-PSS over SHA-256, as Arweave transactions are."""
        return bytes(self._signer.sign(message))

    def export_jwk(self) -> dict[str, Any]:
        """Return a copy of the JWK, private fields included. Handle with care."""
        return dict(self._jwk)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the JWK to ``path``, readable by the owner only (mode 0600)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            json.dump(self._jwk, fh)

    def __repr__(self) -> str:
        return f"ArweaveWallet(address={self.address!r})"

    __str__ = __repr__

    def __reduce__(self) -> NoReturn:
        # A pickled wallet would land in whatever store the caller pickles into.
        raise TypeError("ArweaveWallet holds a private key and cannot be pickled")


def _describe_path(path: str | os.PathLike[str]) -> str:
    # A "path" that is really a pasted key must not be quoted back.
    text = os.fspath(path)
    if len(text) > 255 or any(c in text for c in '{}"'):
        return f"(a path of {len(text)} characters)"
    return repr(text)
