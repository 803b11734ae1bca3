"""The per-signer transaction queues as an operator sees them (``statemachine-wf signers``).

The Ethereum adapter's queue (``adapters/ethereum/txqueue.py``) keeps one transaction per
signer in flight with the core's durable lock ``eth:<chain id>:<signer, lowercase>``: the
instance holding it is the signer's *slot holder*, the instances parked on it are its
*waiting* ones. This view is built from the store alone - the locks table, and the
holder's progress, where the queue writes each transaction it signs (``tx_1`` ... ``tx_N``,
saved before the broadcast) and each re-broadcast (``resent_N``) - so it needs no node and
imports no adapter. What the chain says about the pending hash is the reconciler's business
(``statemachine_wf.reconcilers.ethereum.tx_fate``); here it is what the holder last sent.

A signer absent from the view is idle: nobody holds its slot and nobody waits for it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..core.store import InstanceRecord, Store

__all__ = ["SLOT_PREFIX", "SentTx", "SignerQueue", "sent_transactions", "signer_queues"]

SLOT_PREFIX = "eth:"
"""The lock keys of signer slots start with this: ``eth:<chain id>:<signer>``."""

_RECORD = re.compile(r"^tx_(\d+)$")
_RESENT = re.compile(r"^resent_(\d+)$")


@dataclass(frozen=True, slots=True)
class SentTx:
    """A transaction the slot holder signed (one ``tx_N`` progress record).

    Attributes:
        tx_hash: Its hash.
        nonce: Its nonce.
        signed_at: Unix time it was signed (and recorded, just before its broadcast).
        sent_at: Unix time of its last broadcast: the signing, or a later re-broadcast.
    """

    tx_hash: str
    nonce: int
    signed_at: float
    sent_at: float


@dataclass(frozen=True, slots=True)
class SignerQueue:
    """One signer's queue: who holds the slot, who waits, what was sent last.

    Attributes:
        key: The slot's lock key, ``eth:<chain id>:<signer>``.
        chain_id: The chain id from the key (None if the key does not carry a number).
        signer: The signer's address, lowercase.
        holder: The instance holding the slot.
        holder_type: Its workflow type (None if the instance is gone).
        holder_status: Its status (``RUNNING``; ``STALLED`` needs an operator's look).
        holder_step: The step it is in.
        held_since: Unix time it took the slot.
        waiting: Instances parked on the slot, oldest wait first.
        sent: The holder's transactions, in the order it signed them (first send,
            re-nonces, fee bumps).
        now: When the view was read (ages are counted from it).
        waiting_since: When each of ``waiting`` began to wait (Unix time), same order.
    """

    key: str
    chain_id: int | None
    signer: str
    holder: str
    holder_type: str | None
    holder_status: str | None
    holder_step: str | None
    held_since: float
    waiting: tuple[str, ...]
    sent: tuple[SentTx, ...]
    now: float
    waiting_since: tuple[float, ...] = ()

    @property
    def last_nonce(self) -> int | None:
        """The nonce of the holder's latest transaction (None: nothing signed yet)."""
        return self.sent[-1].nonce if self.sent else None

    @property
    def longest_wait(self) -> float | None:
        """Seconds the oldest waiter has waited for the slot (None: nobody waits)."""
        return max(self.now - min(self.waiting_since), 0.0) if self.waiting_since else None

    @property
    def pending_hash(self) -> str | None:
        """The holder's latest transaction: the one in flight while it holds the slot."""
        return self.sent[-1].tx_hash if self.sent else None

    @property
    def pending_age(self) -> float | None:
        """Seconds since the pending hash was last broadcast (None: nothing sent)."""
        return max(self.now - self.sent[-1].sent_at, 0.0) if self.sent else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, with the derived fields (``statemachine-wf signers --json``)."""
        out = asdict(self)
        out["waiting"] = list(self.waiting)
        out["sent"] = [asdict(s) for s in self.sent]
        out.update(
            last_nonce=self.last_nonce,
            pending_hash=self.pending_hash,
            pending_age=self.pending_age,
        )
        return out


def _number(name: str, pattern: re.Pattern[str]) -> int | None:
    found = pattern.match(name)
    return int(found.group(1)) if found else None


def sent_transactions(progress: Mapping[str, Any]) -> tuple[SentTx, ...]:
    """The queue's records in ``progress`` (``tx_N``, re-broadcasts ``resent_N``), in order."""
    resent: dict[str, float] = {}
    records: list[tuple[int, Mapping[str, Any]]] = []
    for name, value in progress.items():
        if not isinstance(value, Mapping):
            continue
        n = _number(name, _RECORD)
        if n is not None and "tx_hash" in value and "nonce" in value:
            records.append((n, value))
        elif _number(name, _RESENT) is not None and "tx_hash" in value and "at" in value:
            tx_hash = str(value["tx_hash"])
            resent[tx_hash] = max(resent.get(tx_hash, 0.0), float(value["at"]))
    out = []
    # By N, the signing order: the key order of a progress object is the store's own
    # (jsonb sorts its keys), which promises nothing about it.
    for _, value in sorted(records, key=lambda pair: pair[0]):
        tx_hash = str(value["tx_hash"])
        signed_at = float(value.get("signed_at") or 0.0)
        out.append(
            SentTx(
                tx_hash=tx_hash,
                nonce=int(value["nonce"]),
                signed_at=signed_at,
                sent_at=max(signed_at, resent.get(tx_hash, 0.0)),
            )
        )
    return tuple(out)


def _split(key: str) -> tuple[int | None, str]:
    _, _, rest = key.partition(":")
    chain, _, signer = rest.partition(":")
    return (int(chain) if chain.isdigit() else None), signer


def signer_queues(
    store: Store, *, chain_id: int | None = None, now: float | None = None
) -> list[SignerQueue]:
    """Every signer whose slot is held, by key: holder, waiting instances, what was sent.

    Args:
        store: The store the runners use.
        chain_id: Only this chain's signers (default: every chain).
        now: The time ages are counted from (default: this machine's clock).
    """
    # With its closing ':', so chain 1 does not also list chain 10's signers.
    prefix = SLOT_PREFIX if chain_id is None else f"{SLOT_PREFIX}{chain_id}:"
    at = time.time() if now is None else now
    out = []
    for lock in store.locks(prefix=prefix):
        chain, signer = _split(lock.key)
        record: InstanceRecord | None = store.get(lock.holder)
        out.append(
            SignerQueue(
                key=lock.key,
                chain_id=chain,
                signer=signer,
                holder=lock.holder,
                holder_type=record.type if record else None,
                holder_status=str(record.status) if record else None,
                holder_step=record.step if record else None,
                held_since=lock.since,
                waiting=lock.waiters,
                waiting_since=lock.waiting_since,
                sent=sent_transactions(record.progress) if record else (),
                now=at,
            )
        )
    return out
