"""The fate of our own Ethereum transactions: every hash per nonce, checked together.

The transaction queue (:mod:`.txqueue`) asks it before it sends anything again, and a
workflow's reconcile hook asks it for an in-doubt submission (re-exported by
:mod:`statemachine_wf.reconcilers.ethereum`). The rules (seed 002): a recorded hash is a
checkpoint checked first; a fee-bump replacement makes the replaced hash unknown to the
node, so *every* hash ever broadcast for a nonce is checked; no hash known and the nonce
still free means nothing was mined (the same bytes may be sent again); the nonce used by
some other transaction means ours can never be mined (``superseded``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .client import ConfirmationRule, EthereumClient, TxStatus

__all__ = ["Broadcast", "TxVerdict", "VerdictKind", "tx_fate"]

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
