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

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from eth_utils.address import to_checksum_address
from web3.contract import Contract
from web3.exceptions import BadFunctionCallOutput
from web3.types import BlockIdentifier

from statemachine_wf.adapters.ethereum.client import ConfirmationRule, EthereumClient, TxStatus
from statemachine_wf.adapters.ethereum.errors import ChainError

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

VerdictKind = Literal["confirmed", "reverted", "pending", "not_found", "superseded"]


class Broadcast(Protocol):
    """A transaction we signed (and maybe broadcast): its hash and its nonce."""

    @property
    def tx_hash(self) -> str: ...

    @property
    def nonce(self) -> int: ...


@dataclass(frozen=True, slots=True)
class TxVerdict:
    """What happened to a set of our transactions, as the chain sees it now.

    Attributes:
        kind: ``confirmed`` (one succeeded and is deep enough), ``reverted`` (one failed
            and is deep enough), ``pending`` (in the pool, or mined but not yet deep
            enough), ``not_found`` (none known and the latest nonce is still free: the
            same bytes may be broadcast again), ``superseded`` (none known and the latest
            nonce was used by some other transaction: ours can never be mined).
        tx_hash: The hash the verdict is about (the mined one, else the latest checked).
        nonce: That transaction's nonce.
        block_number: The block it was mined in, when mined.
        confirmations: Its depth (0 while not mined).
        revert_reason: For ``reverted``: the reason, when it can be recovered.
        chain_nonce: The sender's ``latest`` nonce when checked (None if not asked).
        checked: Every hash checked, with the kind the node reported for it.
    """

    kind: VerdictKind
    tx_hash: str | None = None
    nonce: int | None = None
    block_number: int | None = None
    confirmations: int = 0
    revert_reason: str | None = None
    chain_nonce: int | None = None
    checked: tuple[tuple[str, str], ...] = field(default=())

    @property
    def final(self) -> bool:
        """Whether the fate is settled (``confirmed`` or ``reverted`` at depth)."""
        return self.kind in ("confirmed", "reverted")

    @property
    def mined(self) -> bool:
        """Whether the transaction is in a block (deep enough or not)."""
        return self.block_number is not None

    def evidence(self) -> dict[str, Any]:
        """JSON-ready evidence for the log (``RECONCILED``)."""
        out: dict[str, Any] = {"tx_fate": self.kind, "hashes_checked": dict(self.checked)}
        for name in ("tx_hash", "nonce", "block_number", "revert_reason", "chain_nonce"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.block_number is not None:
            out["confirmations"] = self.confirmations
        return out


# A receipt kind's rank when several hashes answer: a settled fate beats one in flight,
# which beats an unknown one (a replaced hash is unknown while its replacement is mined).
_RANK = {"confirmed": 0, "reverted": 1, "pending": 2, "not_found": 3}


def tx_fate(
    client: EthereumClient,
    sent: Iterable[Broadcast],
    *,
    sender: str | None,
    confirmations: ConfirmationRule = 1,
) -> TxVerdict:
    """The fate of every transaction we broadcast (all nonces, all fee bumps) together.

    Args:
        client: The chain.
        sent: Our transactions, oldest first. At most one per nonce can ever be mined.
        sender: Their sender; needed to tell ``not_found`` from ``superseded`` (without
            it an unknown set is ``not_found``).
        confirmations: The depth rule for ``confirmed``/``reverted``.

    Returns:
        The verdict. With nothing sent it is ``not_found``.

    Raises:
        RpcUnavailable: The node cannot be asked (the caller retries; it never guesses).
    """
    txs = list(sent)
    if not txs:
        return TxVerdict("not_found")
    latest = txs[-1]
    # The nonce is read *before* the receipts: if one of ours is mined between the two
    # reads, its receipt is already visible below, so it is never taken for somebody
    # else's transaction using the nonce (which would wrongly read as "superseded").
    chain_nonce = client.nonce(sender, "latest") if sender is not None else None
    statuses: list[tuple[Broadcast, TxStatus]] = [
        (tx, client.receipt_status(tx.tx_hash, confirmations=confirmations)) for tx in txs
    ]
    checked = tuple((tx.tx_hash, status.kind) for tx, status in statuses)
    best_tx, best = min(
        statuses, key=lambda pair: (_RANK[pair[1].kind], pair[1].block_number is None)
    )
    if best.kind != "not_found":
        return TxVerdict(
            kind=best.kind,
            tx_hash=best.tx_hash,
            nonce=best_tx.nonce,
            block_number=best.block_number,
            confirmations=best.confirmations,
            revert_reason=best.revert_reason,
            chain_nonce=chain_nonce,
            checked=checked,
        )
    used = chain_nonce is not None and chain_nonce > latest.nonce
    return TxVerdict(
        kind="superseded" if used else "not_found",
        tx_hash=latest.tx_hash,
        nonce=latest.nonce,
        chain_nonce=chain_nonce,
        checked=checked,
    )


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
