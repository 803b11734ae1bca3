"""Errors of the Arweave adapter, rooted at :class:`statemachine_wf.errors.WorkflowError`.

The tree::

    WorkflowError
    └── ArweaveError                 retryable: bool; raised as is for a client with no
        │                            wallet, or served data not matching its data_root
        ├── InsufficientFunds        the wallet cannot pay the reward (HTTP 410/402)   retryable
        ├── InvalidTransaction       the gateway rejected the transaction (HTTP 400)   not retryable
        ├── TransactionNotFound      the gateway does not know the id (or its data)    retryable
        ├── GatewayUnavailable       connection error, timeout, 429 or 5xx             retryable
        └── WalletError              the wallet cannot be loaded                       not retryable

``retryable`` says whether the *same* request may succeed later without a change
to the transaction: a workflow maps retryable errors to Retry/Stall (no funds is a
stall: it waits for someone to top the wallet up) and the others to Fail.

Messages never contain key material: the gateway's answer is kept (truncated), the
request body is not. An error raised without a message says the first paragraph of its
class docstring, on one line, as the core's errors do.
"""

from __future__ import annotations

from statemachine_wf.errors import WorkflowError, default_message

__all__ = [
    "ArweaveError",
    "GatewayUnavailable",
    "InsufficientFunds",
    "InvalidTransaction",
    "TransactionNotFound",
    "WalletError",
]

# Enough of a gateway's answer to diagnose it, not enough to flood a log line.
_MAX_BODY = 300


class ArweaveError(WorkflowError):
    """The Arweave gateway or wallet failed.

    Attributes:
        retryable: whether the same request may succeed later.
        status_code: the HTTP status, when there was a response.
        body: the start of the gateway's answer, when there was one.
        tx_id: the transaction concerned, when known.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str | None = None,
        *,
        status_code: int | None = None,
        body: str | None = None,
        tx_id: str | None = None,
    ) -> None:
        self.status_code = status_code
        self.body = body[:_MAX_BODY] if body is not None else None
        self.tx_id = tx_id
        # With no message, the first paragraph of the class docstring, as the core's errors
        # say (not its first line: a first sentence wrapped over two lines was cut).
        base = message or default_message(type(self))
        details = []
        if tx_id:
            details.append(f"tx {tx_id}")
        if status_code is not None:
            details.append(f"HTTP {status_code}")
        if self.body:
            details.append(repr(self.body))
        super().__init__(f"{base} ({', '.join(details)})" if details else base)


class InsufficientFunds(ArweaveError):
    """The wallet does not have enough AR to pay for the transaction."""

    retryable = True


class InvalidTransaction(ArweaveError):
    """The gateway rejected the transaction as invalid."""

    retryable = False


class TransactionNotFound(ArweaveError):
    """The gateway does not know this transaction."""

    retryable = True


class GatewayUnavailable(ArweaveError):
    """The Arweave gateway could not be reached or failed."""

    retryable = True


class WalletError(ArweaveError):
    """The Arweave wallet could not be loaded."""

    retryable = False
