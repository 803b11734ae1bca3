"""The example contracts, compiled (``npm run build:contracts`` rebuilds them)."""

from __future__ import annotations

from pathlib import Path

from statemachine_wf.adapters.ethereum.contract import ContractArtifact

__all__ = ["CHAOSCHAIN_JSON", "chaoschain_artifact"]

CHAOSCHAIN_JSON = Path(__file__).with_name("ChaosChain.json")


def chaoschain_artifact() -> ContractArtifact:
    """The compiled ``ChaosChain`` contract (ABI + creation bytecode)."""
    return ContractArtifact.load(CHAOSCHAIN_JSON)
