"""The example contracts, compiled (``npm run build:contracts`` rebuilds them)."""

from __future__ import annotations

from pathlib import Path

from statemachine_wf.adapters.ethereum.contract import ContractArtifact

__all__ = ["CHAOSCHAIN_JSON", "PAYOUT_TOKEN_JSON", "chaoschain_artifact", "payout_token_artifact"]

CHAOSCHAIN_JSON = Path(__file__).with_name("ChaosChain.json")
PAYOUT_TOKEN_JSON = Path(__file__).with_name("PayoutToken.json")


def chaoschain_artifact() -> ContractArtifact:
    """The compiled ``ChaosChain`` contract (ABI + creation bytecode)."""
    return ContractArtifact.load(CHAOSCHAIN_JSON)


def payout_token_artifact() -> ContractArtifact:
    """The compiled ``PayoutToken`` contract (a small ERC-20 with once-only payouts)."""
    return ContractArtifact.load(PAYOUT_TOKEN_JSON)
