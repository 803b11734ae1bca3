"""The fate of an Arweave upload whose id we recorded (re-exported by ``reconcilers.arweave``).

The seed's rule is "Arweave is append-only: if we have an Arweave tx id, the content
exists" — as long as the gateway still knows the id. An id the gateway does not know
(never posted because the runner died first, dropped from the mempool, forked out) is
``not_found``: the step posts the *recorded* transaction again (same signature, same id,
no second payment); it never prepares a new one while an id is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .client import ArweaveClient

__all__ = ["UploadKind", "UploadVerdict", "upload_fate"]

UploadKind = Literal["confirmed", "pending", "not_found"]


@dataclass(frozen=True, slots=True)
class UploadVerdict:
    """The fate of one Arweave transaction.

    Attributes:
        kind: ``confirmed`` (in a block, at least the required confirmations),
            ``pending`` (accepted, not mined or not deep enough), ``not_found``.
        tx_id: The transaction id asked about.
        confirmations: Blocks on top of the including block (0 unless mined).
        block_height: The including block, when mined.
    """

    kind: UploadKind
    tx_id: str
    confirmations: int = 0
    block_height: int | None = None

    @property
    def exists(self) -> bool:
        """Whether the gateway holds the transaction (pending or confirmed)."""
        return self.kind != "not_found"

    def evidence(self) -> dict[str, Any]:
        """JSON-ready evidence for the log (``RECONCILED``)."""
        out: dict[str, Any] = {"arweave_status": self.kind, "arweave_tx_id": self.tx_id}
        if self.block_height is not None:
            out["arweave_block_height"] = self.block_height
            out["arweave_confirmations"] = self.confirmations
        return out


def upload_fate(client: ArweaveClient, tx_id: str, *, confirmations: int = 1) -> UploadVerdict:
    """Ask the gateway where ``tx_id`` is.

    Args:
        client: The gateway client (no wallet needed).
        tx_id: The recorded transaction id.
        confirmations: Blocks needed (counting the including one) for ``confirmed``.

    Raises:
        GatewayUnavailable: The gateway could not answer (the caller retries).
        InvalidTransaction: ``tx_id`` is not a transaction id.
    """
    status = client.status(tx_id)
    if status.kind == "not_found":
        return UploadVerdict("not_found", tx_id)
    if status.kind == "pending":
        return UploadVerdict("pending", tx_id)
    # Gateways count the including block as confirmation 1 (arlocal too).
    kind: UploadKind = "confirmed" if status.confirmations >= confirmations else "pending"
    return UploadVerdict(
        kind, tx_id, confirmations=status.confirmations, block_height=status.block_height
    )
