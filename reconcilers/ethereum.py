"""External truth on an Ethereum chain: transaction fates, signer nonces, contract views.

Every function here only *reads* the chain and returns a verdict with its evidence; a
workflow's reconcile hook (or a step) turns the verdict into a transition and puts
:meth:`TxVerdict.evidence` into the log. The rules they serve (seed 002):

* a transaction hash is a checkpoint: its fate is checked before anything is retried;
* a fee-bump replacement makes the replaced hash unknown to the node, so *every* hash
  ever broadcast for a nonce is checked, never only the last one;
* no hash means the action never happened; a nonce used by a transaction that is none of
  ours means ours can never be mined (``superseded``): sign again with a fresh nonce;
* on-chain wins: a contract view (or an event query) read at the confirmation depth says
  whether the effect is already there, whoever caused it (:func:`view`,
  :func:`events_at_depth`; their default depth is the queue's ``DEFAULT_CONFIRMATIONS``).

Contract-specific views belong to the workflow that knows the contract (the ChaosChain
ones are in ``examples/chaoschain/views.py``); a building block declares its check with
:func:`statemachine_wf.adapters.ethereum.steps.view_check`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statemachine_wf.adapters.ethereum.client import EthereumClient
from statemachine_wf.adapters.ethereum.fate import Broadcast, TxVerdict, VerdictKind, tx_fate
from statemachine_wf.adapters.ethereum.views import events_at_depth, view, view_block

__all__ = [
    "Broadcast",
    "NonceState",
    "TxVerdict",
    "VerdictKind",
    "events_at_depth",
    "nonce_used",
    "signer_nonce",
    "tx_fate",
    "view",
    "view_block",
]


@dataclass(frozen=True, slots=True)
class NonceState:
    """A signer's nonces.

    Attributes:
        latest: The first nonce not yet mined (``nonce(addr, "latest")``).
        pending: The next free nonce counting the node's pool.
    """

    latest: int
    pending: int

    @property
    def in_pool(self) -> int:
        """How many of the signer's transactions wait in the pool."""
        return self.pending - self.latest

    def evidence(self) -> dict[str, Any]:
        """JSON-ready evidence for the log."""
        return {"nonce_latest": self.latest, "nonce_pending": self.pending}


def signer_nonce(client: EthereumClient, address: str) -> NonceState:
    """The signer's mined and pending nonces."""
    return NonceState(
        latest=client.nonce(address, "latest"), pending=client.nonce(address, "pending")
    )


def nonce_used(client: EthereumClient, address: str, nonce: int) -> bool:
    """Whether ``nonce`` of ``address`` is used by a mined transaction (any transaction)."""
    return client.nonce(address, "latest") > nonce
