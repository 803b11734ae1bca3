"""The ChaosChain workflows with a quick retry policy, and the helpers the chain tests share.

The examples use the seed's policy (1 s doubling to 16 s, five tries); tests use the same
classes with waits of a tenth of that so that a retry row of the failure table takes
tenths of seconds. Runner child processes import this module too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eth_utils.address import to_checksum_address

from examples.chaoschain import ChaosChainSettings, CloseEpoch, ScoreSubmission, WorkSubmission
from examples.chaoschain.workflows import data_hash_of
from statemachine_wf import RetryPolicy
from statemachine_wf.adapters.arweave import ArweaveClient
from statemachine_wf.adapters.ethereum import EthereumClient, Signer

QUICK = RetryPolicy(
    max_attempts=4,
    initial_delay=0.1,
    max_delay=0.5,
    multiplier=2.0,
    jitter=False,
    on_exhausted="stall",
    stall_retry_after=300.0,
)

STUDIO = to_checksum_address("0x00000000000000000000000000000000000057d1")


class QuickWork(WorkSubmission):
    retry_policy = QUICK


class QuickScore(ScoreSubmission):
    retry_policy = QUICK


class QuickClose(CloseEpoch):
    retry_policy = QUICK


FLOWS = (QuickWork, QuickScore, QuickClose)


def settings(contract: str, **overrides: Any) -> ChaosChainSettings:
    """Settings for tests: one confirmation, quick polls, no fee bumps unless asked."""
    values: dict[str, Any] = {
        "contract_address": contract,
        "confirmations": 1,
        "poll_interval": 0.1,
        "stuck_after": 600.0,
        "not_found_after": 1.0,
    }
    values.update(overrides)
    return ChaosChainSettings(**values)


def deps(
    eth: EthereumClient,
    arweave: ArweaveClient,
    signers: list[Signer],
    chaoschain: ChaosChainSettings,
) -> Mapping[str, Any]:
    """The runner's dependencies."""
    return {
        "eth": eth,
        "arweave": arweave,
        "signers": {s.address.lower(): s for s in signers},
        "chaoschain": chaoschain,
    }


def work_input(n: int, signer: str, *, epoch: int = 1, tag: str = "") -> dict[str, Any]:
    """A valid WorkSubmission input; ``n`` and ``tag`` make the evidence unique."""
    evidence = f"evidence #{n}{tag}: model weights digest and eval report"
    return {
        "studio_address": STUDIO,
        "epoch": epoch,
        "signer_address": signer,
        "data_hash": data_hash_of(evidence),
        "evidence": evidence,
    }
