"""Arweave adapter: upload evidence to Arweave (or arlocal) from durable workflows.

Install with the ``arweave`` extra. The pieces:

* :class:`ArweaveClient` - prepare/post/status/get_data/balance over HTTP, with
  timeouts and every failure mapped to an :class:`ArweaveError`.
* :class:`ArweaveWallet` - a JWK wallet that never shows its private key.
* :mod:`statemachine_wf.adapters.arweave.merkle` - chunking and ``data_root`` as arweave-js does it.
* :func:`start_arlocal` - a loopback-only arlocal for tests and examples.
"""

from __future__ import annotations

from statemachine_wf.adapters.arweave.client import (
    DEFAULT_INLINE_LIMIT,
    ArStatus,
    ArweaveClient,
    StatusKind,
    UploadResult,
)
from statemachine_wf.adapters.arweave.devnode import ArLocalNode, start_arlocal
from statemachine_wf.adapters.arweave.errors import (
    ArweaveError,
    GatewayUnavailable,
    InsufficientFunds,
    InvalidTransaction,
    TransactionNotFound,
    WalletError,
)
from statemachine_wf.adapters.arweave.merkle import compute_data_root, generate_transaction_chunks
from statemachine_wf.adapters.arweave.transaction import PreparedTx, build_transaction
from statemachine_wf.adapters.arweave.wallet import WALLET_ENV_VAR, ArweaveWallet

__all__ = [
    "DEFAULT_INLINE_LIMIT",
    "WALLET_ENV_VAR",
    "ArLocalNode",
    "ArStatus",
    "ArweaveClient",
    "ArweaveError",
    "ArweaveWallet",
    "GatewayUnavailable",
    "InsufficientFunds",
    "InvalidTransaction",
    "PreparedTx",
    "StatusKind",
    "TransactionNotFound",
    "UploadResult",
    "WalletError",
    "build_transaction",
    "compute_data_root",
    "generate_transaction_chunks",
    "start_arlocal",
]
