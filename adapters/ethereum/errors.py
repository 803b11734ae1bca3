"""Chain errors: every failure the Ethereum adapter raises, mapped to one small tree.

The tree (all are :class:`statemachine_wf.errors.WorkflowError`)::

    ChainError                     retryable  anything else the node or library said
    ├── NonceTooLow                yes        the nonce is used: reconcile, then re-nonce
    ├── AlreadyKnown               yes        this exact tx is in the pool or mined: track it
    ├── ReplacementUnderpriced     yes        a tx with this nonce is pending: bump >=10%
    ├── InsufficientFunds          no         fund the signer (a workflow STALLS)
    ├── Reverted(reason)           no         the contract said no (a workflow reconciles/FAILS)
    ├── RpcUnavailable             yes        connection refused, timeout, 5xx, rate limit
    ├── ConfirmationTimeout        yes        not confirmed in time: check its fate, maybe bump
    └── SignerError                no         missing/invalid key or keystore, signing failed

``retryable`` answers one question: may the *same* operation succeed later without a
person doing anything? The runtime maps ``retryable`` to a backoff retry,
:class:`InsufficientFunds` to STALLED, and :class:`Reverted` to the spec's reconcile rule
("already submitted" means done, anything else FAILED).

:func:`classify` is the one place that reads driver errors. It understands both worlds:
a JSON-RPC node (anvil, geth: ``Web3RPCError`` with a message, ``ContractLogicError``)
and the in-process py-evm (``eth_tester.exceptions.TransactionFailed``,
``eth_utils.exceptions.ValidationError``), plus transport errors from requests, aiohttp
and urllib.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import urllib.error
from collections.abc import Iterator
from typing import Any, ClassVar

from eth_abi.abi import decode as abi_decode
from web3 import exceptions as w3exc

from statemachine_wf.definition.redact import redact_text
from statemachine_wf.errors import WorkflowError

__all__ = [
    "AlreadyKnown",
    "ChainError",
    "ConfirmationTimeout",
    "InsufficientFunds",
    "NonceTooLow",
    "ReplacementUnderpriced",
    "Reverted",
    "RpcUnavailable",
    "SignerError",
    "chain_errors",
    "classify",
    "decode_revert_data",
]


class ChainError(WorkflowError):
    """The chain or the node rejected the request."""

    retryable: ClassVar[bool] = False
    code: ClassVar[str] = "chain_error"


class NonceTooLow(ChainError):
    """The nonce was already used by a mined transaction of this sender."""

    retryable = True
    code = "nonce_too_low"


class AlreadyKnown(ChainError):
    """This exact transaction is already in the node's pool or already mined."""

    retryable = True
    code = "already_known"

    def __init__(self, message: str | None = None, *, tx_hash: str | None = None) -> None:
        super().__init__(message)
        self.tx_hash = tx_hash


class ReplacementUnderpriced(ChainError):
    """A pending transaction has this nonce and the new one does not pay enough more."""

    retryable = True
    code = "replacement_underpriced"


class FeeCapTooLow(ChainError):
    """The transaction's fee cap is below the block base fee: the node refuses it (and a
    node evicts such a transaction from its pool when the base fee rises past it). The
    same bytes can never be accepted while the base fee stays there; a replacement with
    raised fees can."""

    retryable = True
    code = "fee_cap_too_low"


class InsufficientFunds(ChainError):
    """The sender cannot pay gas * price + value."""

    code = "insufficient_funds"


class Reverted(ChainError):
    """The contract reverted.

    Attributes:
        reason: The ``Error(string)`` reason (``"already submitted"``), a ``panic 0x..``
            description, or None when the revert carried no decodable reason.
        data: The raw revert data as 0x-hex, when the node returned it.
        tx_hash: The mined transaction, when the revert was seen in a receipt.
    """

    code = "reverted"

    def __init__(
        self,
        reason: str | None = None,
        *,
        data: str | None = None,
        tx_hash: str | None = None,
    ) -> None:
        super().__init__(f"execution reverted: {reason}" if reason else "execution reverted")
        self.reason = reason
        self.data = data
        self.tx_hash = tx_hash


class RpcUnavailable(ChainError):
    """The node could not be reached or did not answer in time."""

    retryable = True
    code = "rpc_unavailable"


class ConfirmationTimeout(ChainError):
    """The transaction was not confirmed within the time allowed.

    Attributes:
        tx_hash: The transaction waited for.
        last_kind: Its last observed status kind (``pending`` or ``not_found``).
    """

    retryable = True
    code = "confirmation_timeout"

    def __init__(self, tx_hash: str, last_kind: str, timeout: float) -> None:
        super().__init__(f"transaction {tx_hash} not confirmed within {timeout}s ({last_kind})")
        self.tx_hash = tx_hash
        self.last_kind = last_kind


class SignerError(ChainError):
    """The signer is misconfigured or could not sign."""

    code = "signer_error"


_ERROR_SELECTOR = bytes.fromhex("08c379a0")  # Error(string)
_PANIC_SELECTOR = bytes.fromhex("4e487b71")  # Panic(uint256)
_REVERT_PREFIX = re.compile(
    r"^(?:VM Exception while processing transaction: )?"
    r"execution reverted:?\s*",
    re.IGNORECASE,
)


def decode_revert_data(data: bytes | str | None) -> str | None:
    """Decode revert data to a reason.

    Args:
        data: The revert output (bytes or 0x-hex).

    Returns:
        The ``Error(string)`` message, ``"panic 0x11"`` for ``Panic(uint256)``, the hex of
        a custom error, or None for empty data.
    """
    if data is None:
        return None
    raw = bytes.fromhex(data.removeprefix("0x")) if isinstance(data, str) else bytes(data)
    if not raw:
        return None
    try:
        if raw[:4] == _ERROR_SELECTOR:
            (reason,) = abi_decode(["string"], raw[4:])
            return str(reason)
        if raw[:4] == _PANIC_SELECTOR:
            (code,) = abi_decode(["uint256"], raw[4:])
            return f"panic 0x{int(code):02x}"
    except Exception:  # malformed ABI payload: fall through to the hex form
        pass
    return "0x" + raw.hex()


def _reason_from_message(message: str) -> str | None:
    reason = _REVERT_PREFIX.sub("", message, count=1).strip()
    return reason or None


def _rpc_error(exc: w3exc.Web3RPCError) -> tuple[str, int | None, str | None]:
    """The JSON-RPC error's message, code and (revert) data."""
    error: Any = (exc.rpc_response or {}).get("error")
    if isinstance(error, dict):
        code, data = error.get("code"), error.get("data")
        return (
            str(error.get("message", "")),
            code if isinstance(code, int) else None,
            data if isinstance(data, str) and data.startswith("0x") else None,
        )
    return str(exc.message or exc), None, None


# Node messages, lowercased. anvil answers -32003, geth -32000; the text is what is stable.
_MESSAGE_MAP: tuple[tuple[tuple[str, ...], type[ChainError]], ...] = (
    (("nonce too low", "nonce is too low", "oldnonce"), NonceTooLow),
    (
        ("already known", "already imported", "known transaction", "alreadyknown"),
        AlreadyKnown,
    ),
    (("replacement transaction underpriced", "replacement fee too low"), ReplacementUnderpriced),
    (
        (
            "max fee per gas less than block base fee",
            "fee cap less than block base fee",
            "feetoolow",
        ),
        FeeCapTooLow,
    ),
    (("insufficient funds", "cannot afford txn", "insufficient balance"), InsufficientFunds),
    (("limit exceeded", "rate limit", "too many requests", "timeout"), RpcUnavailable),
)

_NONCE_MISMATCH = re.compile(r"invalid transaction nonce: expected (\d+), but got (\d+)")


def _from_message(message: str, code: int | None = None) -> ChainError | None:
    lowered = message.lower()
    if "execution reverted" in lowered or "vm exception" in lowered:
        return Reverted(_reason_from_message(message))
    if (match := _NONCE_MISMATCH.search(lowered)) is not None:
        expected, got = int(match.group(1)), int(match.group(2))
        if got < expected:
            return NonceTooLow(message)
        return ChainError(message)  # py-evm has no queue: a future nonce is just rejected
    for needles, cls in _MESSAGE_MAP:
        if any(needle in lowered for needle in needles):
            return cls(message)
    if code == 429:
        return RpcUnavailable(message)
    return None


def _is_transport_error(exc: BaseException) -> bool:
    if isinstance(
        exc,
        ConnectionError
        | TimeoutError
        | urllib.error.URLError
        | http.client.HTTPException
        | w3exc.ProviderConnectionError
        | w3exc.RequestTimedOut
        | w3exc.TooManyRequests,
    ):
        return True
    # requests and aiohttp are web3's transports; matched by module so that neither has to
    # be imported (requests ships no type stubs) just to recognise its exceptions.
    module = type(exc).__module__
    return module.startswith(("requests.", "urllib3.", "aiohttp."))


def classify(exc: BaseException, url: str | None = None) -> ChainError:
    """Map a web3 / py-evm / transport exception to a :class:`ChainError`.

    Args:
        exc: The exception raised by web3, eth-tester, py-evm or the HTTP transport.
        url: The node's endpoint, if known: its credentials (userinfo, path, query) are
            removed from the message, as is every URL in it (see
            :func:`statemachine_wf.definition.redact.redact_text`).

    Returns:
        The matching domain error (a new instance; raise it ``from exc``, or, for
        :class:`RpcUnavailable`, whose cause's text holds the URL, without a cause as
        :func:`chain_errors` does). A :class:`ChainError` is returned as is.
    """
    if isinstance(exc, ChainError):
        return exc
    found = _classify(exc)
    if found.args and isinstance(found.args[0], str):
        cleaned = redact_text(found.args[0], url)
        if cleaned != found.args[0]:
            found.args = (cleaned, *found.args[1:])
    return found


def _classify(exc: BaseException) -> ChainError:
    if isinstance(exc, w3exc.ContractLogicError):
        # ContractLogicError also covers ContractCustomError/ContractPanicError.
        data = exc.data if isinstance(exc.data, str) else None
        reason = decode_revert_data(data) if data else None
        if reason is None or reason.startswith("0x"):
            reason = _reason_from_message(str(exc.message or "")) or reason
        return Reverted(reason, data=data)
    if _is_transport_error(exc):  # first: RequestTimedOut is also a Web3RPCError
        return RpcUnavailable(f"RPC unavailable: {type(exc).__name__}: {exc}")
    if isinstance(exc, w3exc.Web3RPCError):
        message, code, data = _rpc_error(exc)
        found = _from_message(message, code) or ChainError(message or type(exc).__name__)
        if isinstance(found, Reverted) and data:
            # geth-style nodes put the revert payload in error.data, not in the message.
            return Reverted(decode_revert_data(data) or found.reason, data=data)
        return found
    # py-evm / eth-tester (imported by name: eth-tester is a test-only dependency).
    name = f"{type(exc).__module__}.{type(exc).__name__}"
    message = str(exc.args[0]) if exc.args else str(exc)
    if name == "eth_tester.exceptions.TransactionFailed":
        return Reverted(_reason_from_message(message) if message else None)
    if name in {"eth_utils.exceptions.ValidationError", "eth_tester.exceptions.ValidationError"}:
        return _from_message(message) or ChainError(message)
    return ChainError(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)


@contextlib.contextmanager
def chain_errors(url: str | None = None) -> Iterator[None]:
    """Re-raise any exception in the block as its :func:`classify` result.

    The original stays as ``__cause__`` for debugging, except for transport errors
    (:class:`RpcUnavailable`): their text and their own causes (requests, urllib3) carry
    the request URL with any API key in it, so they are dropped; the new message keeps
    the exception type and the redacted text.

    Args:
        url: The node's endpoint, redacted from messages (see :func:`classify`).
    """
    error: ChainError | None = None
    try:
        yield
    except ChainError:
        raise
    except Exception as exc:
        error = classify(exc, url)
        if not isinstance(error, RpcUnavailable):
            raise error from exc
    if error is not None:  # raised outside the handler: no __context__ either
        error.__cause__ = None
        error.__suppress_context__ = True
        raise error
