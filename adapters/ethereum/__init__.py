"""Ethereum adapter: signers, a client with classified errors, a dev node, deploys.

Needs the ``ethereum`` extra (``pip install 'statemachine_wf[ethereum]'``).
"""

from __future__ import annotations

from .client import ConfirmationRule, EthereumClient, Fees, TxKind, TxStatus
from .contract import ContractArtifact, deploy
from .devnode import AnvilNode, DevNodeError, find_anvil, start_anvil
from .errors import (
    AlreadyKnown,
    ChainError,
    ConfirmationTimeout,
    FeeCapTooLow,
    InsufficientFunds,
    NonceTooLow,
    ReplacementUnderpriced,
    Reverted,
    RpcUnavailable,
    SignerError,
    chain_errors,
    classify,
    decode_revert_data,
)
from .signer import LocalSigner, SignedTx, Signer

__all__ = [
    "AlreadyKnown",
    "AnvilNode",
    "ChainError",
    "ConfirmationRule",
    "ConfirmationTimeout",
    "ContractArtifact",
    "DevNodeError",
    "EthereumClient",
    "FeeCapTooLow",
    "Fees",
    "InsufficientFunds",
    "LocalSigner",
    "NonceTooLow",
    "ReplacementUnderpriced",
    "Reverted",
    "RpcUnavailable",
    "SignedTx",
    "Signer",
    "SignerError",
    "TxKind",
    "TxStatus",
    "chain_errors",
    "classify",
    "decode_revert_data",
    "deploy",
    "find_anvil",
    "start_anvil",
]
