"""The adapter's public surface is pinned: a change here is an API change."""

from __future__ import annotations

import statemachine_wf.adapters.ethereum as eth


def test_exported_members() -> None:
    assert sorted(eth.__all__) == [
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
    for name in eth.__all__:
        assert getattr(eth, name) is not None
