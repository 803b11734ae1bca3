"""External truth on an Ethereum chain: transaction fates, signer nonces, contract views.

Every function here only *reads* the chain and returns a verdict with its evidence; a
workflow's reconcile hook (or a step) turns the verdict into a transition and puts
:meth:`TxVerdict.evidence` into the log. The rules they serve (seed 002):

* a transaction hash is a checkpoint: its fate is checked before anything is retried;
* a fee-bump replacement makes the replaced hash unknown to the node, so *every* hash
  ever broadcast for a nonce is checked, never only the last one;
* no hash means the action never happened; a nonce used by a transaction that is none of
  ours means ours can never be mined (``superseded``): sign again with a fresh nonce;
* on-chain wins: a contract view read at the confirmation depth says whether the effect
  is already there, whoever caused it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eth_utils.address import to_checksum_address
from web3.contract import Contract
from web3.exceptions import BadFunctionCallOutput
from web3.types import BlockIdentifier

from statemachine_wf.adapters.ethereum.client import ConfirmationRule, EthereumClient
from statemachine_wf.adapters.ethereum.errors import ChainError
from statemachine_wf.adapters.ethereum.fate import Broadcast, TxVerdict, VerdictKind, tx_fate

__all__ = [
    "Broadcast",
    "NonceState",
    "TxVerdict",
    "VerdictKind",
    "epoch_closed",
    "nonce_used",
    "score_submitted",
    "signer_nonce",
    "tx_fate",
    "view",
    "view_block",
    "work_evidence",
    "work_submitted",
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


def view_block(client: EthereumClient, confirmations: ConfirmationRule = 1) -> BlockIdentifier:
    """The block a view must be read at for its answer to be ``confirmations`` deep.

    ``1`` is the head; ``N`` is ``head - N + 1`` (never below 0); the ``safe`` and
    ``finalized`` tags are passed through.
    """
    if isinstance(confirmations, str):
        return confirmations
    return max(client.block_number() - max(confirmations, 1) + 1, 0)


def view(
    client: EthereumClient,
    contract: Contract,
    fn: str,
    *args: Any,
    confirmations: ConfirmationRule = 1,
) -> Any:
    """Call a view function as of the confirmation depth (see :func:`view_block`).

    Reading at depth makes "on-chain wins" safe: an effect that a reorg can still undo
    is not yet taken as done.

    Returns:
        The view's result; None when the contract did not exist yet at that block.

    Raises:
        RpcUnavailable: The node is unreachable.
        Reverted: The view reverted.
    """
    block = view_block(client, confirmations)
    try:
        return client.call_view(contract, fn, *args, block=block)
    except ChainError as exc:
        # At a block before the contract was deployed a view returns no data at all:
        # nothing can have happened there yet. Anything else is a real failure.
        if isinstance(exc.__cause__, BadFunctionCallOutput) and not _has_code(
            client, contract.address, block
        ):
            return None
        raise


def _has_code(client: EthereumClient, address: str, block: BlockIdentifier) -> bool:
    with client.errors():
        return len(client.w3.eth.get_code(to_checksum_address(address), block)) > 0


def work_submitted(
    client: EthereumClient,
    contract: Contract,
    studio: str,
    epoch: int,
    data_hash: str | bytes,
    *,
    confirmations: ConfirmationRule = 1,
) -> bool:
    """ChaosChain: is work ``data_hash`` of ``studio``/``epoch`` on chain (at depth)?"""
    return bool(
        view(
            client,
            contract,
            "workSubmitted",
            studio,
            epoch,
            _b32(data_hash),
            confirmations=confirmations,
        )
    )


def work_evidence(
    client: EthereumClient,
    contract: Contract,
    studio: str,
    epoch: int,
    data_hash: str | bytes,
    *,
    confirmations: ConfirmationRule = 1,
) -> tuple[str, str] | None:
    """ChaosChain: who submitted the work and with which evidence id, or None."""
    answer = view(
        client,
        contract,
        "workEvidence",
        studio,
        epoch,
        _b32(data_hash),
        confirmations=confirmations,
    )
    if answer is None:
        return None
    submitter, evidence_id = answer
    if int(str(submitter), 16) == 0:
        return None
    return str(submitter), str(evidence_id)


def score_submitted(
    client: EthereumClient,
    contract: Contract,
    studio: str,
    epoch: int,
    data_hash: str | bytes,
    scorer: str,
    *,
    confirmations: ConfirmationRule = 1,
) -> bool:
    """ChaosChain: has ``scorer`` scored this work (at depth)?"""
    return bool(
        view(
            client,
            contract,
            "scoreSubmitted",
            studio,
            epoch,
            _b32(data_hash),
            scorer,
            confirmations=confirmations,
        )
    )


def epoch_closed(
    client: EthereumClient,
    contract: Contract,
    studio: str,
    epoch: int,
    *,
    confirmations: ConfirmationRule = 1,
) -> bool:
    """ChaosChain: is the epoch closed (at depth)?"""
    return bool(view(client, contract, "epochClosed", studio, epoch, confirmations=confirmations))


def _b32(value: str | bytes) -> bytes:
    raw = bytes.fromhex(value.removeprefix("0x")) if isinstance(value, str) else bytes(value)
    if len(raw) != 32:
        raise ValueError(f"expected 32 bytes, got {len(raw)}")
    return raw
