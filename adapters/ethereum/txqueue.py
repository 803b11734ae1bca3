"""The per-signer transaction queue: one transaction per signer in flight, crash-safe.

A step that sends a transaction does it through :class:`TxQueue`::

    queue = TxQueue(self.eth, signer, QueueSettings(confirmations="safe"))

    @step(name="SUBMIT_ONCHAIN", to="AWAIT_TX_CONFIRM")
    def submit(self, ctx):
        queue.submit(ctx, lambda nonce: self.eth.build_call(c, "f", x, sender=a, nonce=nonce))

    @step(name="AWAIT_TX_CONFIRM", to=COMPLETED)
    def await_confirm(self, ctx):
        verdict = queue.await_final(ctx)      # raises Snooze while pending
        ...

The slot is the core's durable lock (``ctx.hold``) on ``eth:<chain id>:<signer>``. It
belongs to the workflow *instance*: it is taken in the submit step, kept through the
await step and across runner crashes, and released when the transaction is final (or
when the instance ends). Instances waiting for it are parked and woken by the core when
it frees; nothing here sleeps or polls for the slot.

Under the slot, in this order:

1. the nonce comes from the chain (``pending``: a transaction of this signer sent by
   another path is queued behind, not collided with);
2. the transaction is built and signed;
3. the signed bytes, hash and nonce are saved durably (``ctx.save`` of a :class:`TxRecord`
   into the next free ``tx_N`` progress field) — *before* the broadcast;
4. the bytes are broadcast; re-sending the same bytes is idempotent (``AlreadyKnown``).

A crash anywhere is resolved from the records: every hash ever broadcast is checked
(:func:`statemachine_wf.adapters.ethereum.fate.tx_fate`); unknown hashes with the nonce
still free mean the same bytes are broadcast again; unknown hashes with the nonce used by
some other transaction mean ours can never be mined, and a new transaction is signed with a fresh
nonce (into the next slot). A transaction pending in the pool for longer than
``stuck_after`` is replaced by the same transaction with both fee fields raised by at
least 10% (and to what the market asks now), recorded in the next slot before it is
broadcast. A lost transaction whose bytes the node refuses because the base fee rose
past their fee cap (``FeeCapTooLow``: a node evicts such a transaction from its pool) is
replaced the same way instead of being sent again.

A node that keeps dropping the same transaction is not fed it forever: every re-broadcast
of recorded bytes is itself recorded once sent (``resent_N``: the hash and the time), and once
a hash has been re-broadcast ``max_rebroadcasts`` times (default 3) and the node has lost
it again, the step is STALLED (code ``tx_dropped``, the hash and the count in the
message). A STALLED instance keeps its slot (a transaction of its nonce may still be in
some pool); each retry of the step checks every recorded hash first, so a transaction
mined meanwhile is followed, and a nonce used by another transaction is signed anew;
the dropped bytes are not sent again.

**The per-instance limits.** Progress fields are set once, so the records live in
numbered fields of :class:`TxQueueProgress` (a workflow's progress model inherits it):
``tx_1`` … ``tx_10``, ten *signed* transactions per instance (the first send, re-signs
with a fresh nonce and fee-bump replacements together), and ``resent_1`` …
``resent_10``, ten re-broadcasts of recorded bytes. When the tenth ``tx_N`` is used,
a stuck transaction is no longer bumped (it waits in the pool at its last fee) and a
superseded one is not re-signed: the step is STALLED with code ``tx_slots_exhausted``;
when every ``resent_N`` is used the step is STALLED with code ``tx_dropped``. With the
defaults (a bump after 30 s in the pool) ten records cover about five minutes of a
rising fee market; a workflow that needs more sends more than one instance's worth of
transactions and is better split (one instance per transaction).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from pydantic import BaseModel, ConfigDict

from statemachine_wf.errors import Snooze, Stall
from statemachine_wf.runtime.context import StepContext

from .client import ConfirmationRule, EthereumClient
from .errors import AlreadyKnown, FeeCapTooLow, NonceTooLow
from .fate import TxVerdict, tx_fate
from .signer import SignedTx, Signer

__all__ = [
    "DEFAULT_CONFIRMATIONS",
    "RESEND_SLOTS",
    "TX_SLOTS",
    "QueueSettings",
    "Resend",
    "TxQueue",
    "TxQueueProgress",
    "TxRecord",
    "tx_records",
]

log = logging.getLogger(__name__)


class _Broadcasts:
    """When this process last broadcast each transaction (by hash), for the grace period.

    A node (above all a load-balanced RPC endpoint, whose next query may reach another
    backend) can answer "unknown" for a transaction it accepted a moment ago. The await
    step gives it ``not_found_after`` seconds from the *last* broadcast, not only from the
    signing: without it, a re-broadcast after a reorg could be taken for lost at once and
    sent round the submit step again. In memory only: after a restart the signing time is
    the reference again, and what that costs is one more re-broadcast of the same bytes.
    """

    def __init__(self, keep: int = 4096) -> None:
        self._at: OrderedDict[str, float] = OrderedDict()
        self._keep = keep
        self._lock = threading.Lock()

    def mark(self, tx_hash: str, at: float) -> None:
        with self._lock:
            self._at[tx_hash] = at
            self._at.move_to_end(tx_hash)
            while len(self._at) > self._keep:
                self._at.popitem(last=False)

    def last(self, tx_hash: str) -> float | None:
        with self._lock:
            return self._at.get(tx_hash)


_BROADCASTS = _Broadcasts()

DEFAULT_CONFIRMATIONS: Final = 2
"""The default depth before a transaction (or a contract view) counts as final.

Both :class:`QueueSettings` and the ChaosChain example's settings use it. Why 2 and not 1:
at depth 1 a transaction is final as soon as it is in the head block, and the most common
reorganisation, one block, takes the head block back; a workflow that completed on it
would say COMPLETED for an effect the chain may no longer have (nothing re-checks a
COMPLETED instance). Depth 2 survives a one-block reorg at the cost of one block time per
transaction of a signer. It is a default for development and test chains: on mainnet use
``"safe"`` or ``"finalized"``, which no fixed small depth replaces.
"""

TX_SLOTS: tuple[str, ...] = tuple(f"tx_{n}" for n in range(1, 11))
"""The progress fields holding signed transactions, in order of use."""

RESEND_SLOTS: tuple[str, ...] = tuple(f"resent_{n}" for n in range(1, 11))
"""The progress fields recording re-broadcasts of recorded bytes, in order of use."""


class TxRecord(BaseModel):
    """One signed transaction, saved before it is broadcast.

    Everything here is public once broadcast (no key material): the raw bytes to send
    again after a crash, and the unsigned fields to build a fee-bump replacement from.

    Attributes:
        nonce: The sender nonce.
        tx_hash: The hash, 0x-hex (known before broadcast).
        raw_hex: The signed RLP bytes, 0x-hex.
        sender: The sender address.
        to: The target (None for a contract creation).
        data: The calldata, 0x-hex.
        value: Wei sent.
        gas: The gas limit.
        chain_id: The chain id.
        max_fee_per_gas: EIP-1559 fee cap, wei.
        max_priority_fee_per_gas: EIP-1559 tip, wei.
        signed_at: Unix time of signing (for "stuck" and "not found after" timeouts).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    nonce: int
    tx_hash: str
    raw_hex: str
    sender: str
    to: str | None
    data: str
    value: int
    gas: int
    chain_id: int
    max_fee_per_gas: int
    max_priority_fee_per_gas: int
    signed_at: float

    def unsigned(self) -> dict[str, Any]:
        """The transaction dict it was signed from (to build a replacement)."""
        tx: dict[str, Any] = {
            "type": 2,
            "chainId": self.chain_id,
            "from": self.sender,
            "nonce": self.nonce,
            "data": self.data,
            "value": self.value,
            "gas": self.gas,
            "maxFeePerGas": self.max_fee_per_gas,
            "maxPriorityFeePerGas": self.max_priority_fee_per_gas,
        }
        if self.to is not None:
            tx["to"] = self.to
        return tx

    @classmethod
    def of(cls, tx: Mapping[str, Any], signed: SignedTx, *, signed_at: float) -> TxRecord:
        """The record of ``tx`` signed as ``signed``."""
        return cls(
            nonce=signed.nonce,
            tx_hash=signed.tx_hash,
            raw_hex=signed.raw_hex,
            sender=str(tx["from"]),
            to=str(tx["to"]) if tx.get("to") else None,
            data=str(tx.get("data") or "0x"),
            value=int(tx.get("value") or 0),
            gas=int(tx["gas"]),
            chain_id=int(tx["chainId"]),
            max_fee_per_gas=int(tx["maxFeePerGas"]),
            max_priority_fee_per_gas=int(tx["maxPriorityFeePerGas"]),
            signed_at=signed_at,
        )


class Resend(BaseModel):
    """One re-broadcast of a recorded transaction's bytes, saved before it is sent.

    Attributes:
        tx_hash: The transaction sent again.
        at: Unix time of the re-broadcast.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tx_hash: str
    at: float


class TxQueueProgress(BaseModel):
    """Progress fields of the queue; inherit them in a workflow's progress model."""

    crash_dependent: ClassVar[frozenset[str]] = frozenset(RESEND_SLOTS)
    """A re-broadcast is recorded once sent (``_rebroadcast``): a crash between the two
    leaves it unrecorded, and a run with other crashes re-broadcasts at other times. The
    testing helper's crashed-against-uncrashed comparison leaves these fields out
    (:func:`statemachine_wf.testing.machine.crash_dependent`)."""

    tx_1: TxRecord | None = None
    tx_2: TxRecord | None = None
    tx_3: TxRecord | None = None
    tx_4: TxRecord | None = None
    tx_5: TxRecord | None = None
    tx_6: TxRecord | None = None
    tx_7: TxRecord | None = None
    tx_8: TxRecord | None = None
    tx_9: TxRecord | None = None
    tx_10: TxRecord | None = None
    resent_1: Resend | None = None
    resent_2: Resend | None = None
    resent_3: Resend | None = None
    resent_4: Resend | None = None
    resent_5: Resend | None = None
    resent_6: Resend | None = None
    resent_7: Resend | None = None
    resent_8: Resend | None = None
    resent_9: Resend | None = None
    resent_10: Resend | None = None


def tx_records(progress: BaseModel) -> list[TxRecord]:
    """Every transaction recorded in ``progress``, in the order they were signed."""
    out: list[TxRecord] = []
    for name in TX_SLOTS:
        value = getattr(progress, name, None)
        if isinstance(value, TxRecord):
            out.append(value)
        elif isinstance(value, Mapping):  # a progress model that keeps plain dicts
            out.append(TxRecord.model_validate(value))
    return out


def resends(progress: BaseModel) -> list[Resend]:
    """Every re-broadcast recorded in ``progress``, oldest first."""
    out: list[Resend] = []
    for name in RESEND_SLOTS:
        value = getattr(progress, name, None)
        if isinstance(value, Resend):
            out.append(value)
        elif isinstance(value, Mapping):
            out.append(Resend.model_validate(value))
    return out


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """How the queue waits and when it replaces.

    Attributes:
        confirmations: Depth for a final verdict (blocks, or ``safe``/``finalized``);
            default :data:`DEFAULT_CONFIRMATIONS` (2).
        poll_interval: Seconds between checks while a transaction is pending (Snooze).
        stuck_after: Seconds in the pool (not mined) before a fee bump.
        not_found_after: Seconds after signing before a transaction the node does not
            know counts as lost (the caller then submits again); before that a node that
            has not seen it yet is given time.
        bump_factor: Raise of both fee fields on replacement (>= 1.1).
        slot_recheck: Safety-net seconds for a lost wake-up while waiting for the slot.
        head_poll: Seconds between two questions for the node's head block, asked once
            per process for every pending transaction (:mod:`.heads`): a pending await step
            is woken by the next block, so ``poll_interval`` is only its safety net. None:
            no watcher, the step looks every ``poll_interval``.
        max_rebroadcasts: How many times the same recorded transaction is broadcast again
            after the node lost it (dropped from its pool, or reorged out) before the step
            is STALLED with code ``tx_dropped``; 0 never re-broadcasts. At most
            ``len(RESEND_SLOTS)`` (10).
    """

    confirmations: ConfirmationRule = DEFAULT_CONFIRMATIONS
    poll_interval: float = 1.0
    stuck_after: float = 30.0
    not_found_after: float = 10.0
    bump_factor: float = 1.125
    slot_recheck: float = 30.0
    max_rebroadcasts: int = 3
    head_poll: float | None = 0.1

    def __post_init__(self) -> None:
        if self.bump_factor < 1.1:
            raise ValueError(
                f"bump_factor must be >= 1.1 (nodes require +10%), got {self.bump_factor}"
            )
        if self.poll_interval <= 0:
            raise ValueError("poll_interval must be > 0")
        if self.head_poll is not None and self.head_poll <= 0:
            raise ValueError("head_poll must be > 0 (or None: no head watcher)")
        if not 0 <= self.max_rebroadcasts <= len(RESEND_SLOTS):
            raise ValueError(
                f"max_rebroadcasts must be between 0 and {len(RESEND_SLOTS)}, "
                f"got {self.max_rebroadcasts}"
            )


Ctx = StepContext[Any, Any]
Build = Callable[[int], Mapping[str, Any]]


class TxQueue:
    """The transaction queue of one signer on one chain, used from workflow steps.

    Args:
        client: The chain.
        signer: Signs for the queue's address (the key never leaves it).
        settings: Waiting and replacement rules.
        clock: Unix time source (tests).
    """

    def __init__(
        self,
        client: EthereumClient,
        signer: Signer,
        settings: QueueSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.signer = signer
        self.settings = settings or QueueSettings()
        self._clock = clock

    def __repr__(self) -> str:
        return f"TxQueue({self.key!r})"

    @property
    def key(self) -> str:
        """The durable slot's lock key: ``eth:<chain id>:<signer address, lowercase>``."""
        return f"eth:{self.client.chain_id}:{self.signer.address.lower()}"

    # --- reading ------------------------------------------------------------------------

    def fate(self, progress: BaseModel) -> TxVerdict:
        """The verdict on every transaction recorded in ``progress`` (all hashes checked)."""
        return tx_fate(
            self.client,
            tx_records(progress),
            sender=self.signer.address,
            confirmations=self.settings.confirmations,
        )

    # --- the submit step ----------------------------------------------------------------

    def submit(self, ctx: Ctx, build: Build) -> TxRecord:
        """Hold the slot and make sure one transaction of ours is on its way.

        If a recorded transaction is pending or settled, nothing is sent. If none is
        known and its nonce is free, the recorded bytes are broadcast again. Otherwise
        (nothing recorded, or the nonce was used by somebody else) ``build(nonce)`` is
        called with the chain's next nonce, signed, recorded, and broadcast.

        Args:
            ctx: The running step (its progress model inherits :class:`TxQueueProgress`).
            build: Makes the complete unsigned transaction for a nonce (typically
                ``client.build_call(..., nonce=nonce)``); a revert seen while estimating
                gas surfaces here as ``Reverted``, before anything is recorded.

        Returns:
            The record of the transaction in flight.

        Raises:
            Waiting: Another instance holds the slot (the step is parked and woken).
            Reverted: ``build`` saw the call revert.
            NonceTooLow: Our nonce was taken by a transaction that is not ours; retry the
                step (it re-checks its preconditions, then signs with a fresh nonce).
            InsufficientFunds: The signer cannot pay (a workflow stalls).
            RpcUnavailable: The node is unreachable (the record is saved; a retry checks
                the hash first).
            Stall: All ``tx_N`` slots are used (``tx_slots_exhausted``), or the node lost
                the recorded transaction again after ``max_rebroadcasts`` re-broadcasts
                (``tx_dropped``).
        """
        ctx.hold(self.key, recheck=self.settings.slot_recheck)
        records = tx_records(ctx.progress)
        if records:
            verdict = self.fate(ctx.progress)
            if verdict.kind in ("confirmed", "reverted", "pending"):
                log.info("%s: %s already %s; nothing sent", self.key, verdict.tx_hash, verdict.kind)
                return _record_of(records, verdict)
            if verdict.kind == "not_found":
                latest = records[-1]
                try:
                    self._rebroadcast(ctx, latest)
                except FeeCapTooLow:
                    # Evicted when the base fee rose past its fee cap (or refused now for
                    # it): these bytes cannot be accepted again; a replacement can.
                    return self._bump(ctx, latest)
                return latest
            log.info(
                "%s: nonce %s used by another transaction; signing anew", self.key, verdict.nonce
            )
        nonce = self.client.nonce(self.signer.address, "pending")
        tx = dict(build(nonce))
        tx["nonce"] = nonce
        return self._sign_record_send(ctx, tx)

    # --- the await step -----------------------------------------------------------------

    def await_final(self, ctx: Ctx) -> TxVerdict:
        """Check our transactions; return once their fate is known, Snooze while pending.

        A transaction pending in the pool for longer than ``stuck_after`` is replaced
        with a fee bump (recorded, then broadcast) before snoozing.

        Returns:
            ``confirmed`` / ``reverted`` at depth; ``not_found`` when the node has not
            known any of our hashes for ``not_found_after`` seconds (submit again: the
            same bytes are re-broadcast); ``superseded`` when the nonce was used by
            another transaction (submit again: a fresh nonce is signed).

        Raises:
            Snooze: Still pending (or not found for less than ``not_found_after``).
            Waiting: The slot is held by another instance (it was lost by this one).
        """
        ctx.hold(self.key, recheck=self.settings.slot_recheck)
        records = tx_records(ctx.progress)
        if not records:
            return TxVerdict("not_found")
        heads = (
            None if self.settings.head_poll is None else self.client.heads(self.settings.head_poll)
        )
        # The head before the look: a block that comes between the two wakes us at once.
        head = None if heads is None else self.client.block_number()
        verdict = self.fate(ctx.progress)
        if verdict.final or verdict.kind == "superseded":
            return verdict
        latest = records[-1]
        age = self._clock() - latest.signed_at
        if verdict.kind == "pending":
            if (
                not verdict.mined
                and age >= self.settings.stuck_after
                and verdict.nonce == latest.nonce
                and len(records) < len(TX_SLOTS)
            ):
                self._bump(ctx, latest)
                where = "replaced with a fee bump"
            elif verdict.mined:
                where = f"mined in {verdict.block_number}, {verdict.confirmations} deep"
            else:
                where = "in the pool"
            if heads is not None and head is not None:
                # Nothing changes for a pending transaction until a new block: look then.
                heads.after(head, ctx.waker())
            raise Snooze(self.settings.poll_interval, f"tx {verdict.tx_hash} pending ({where})")
        sent = max(
            latest.signed_at,
            _BROADCASTS.last(latest.tx_hash) or 0.0,
            *(r.at for r in resends(ctx.progress) if r.tx_hash == latest.tx_hash),
        )
        if self._clock() - sent < self.settings.not_found_after:
            raise Snooze(self.settings.poll_interval, f"tx {latest.tx_hash} not seen yet")
        return verdict

    def release(self, ctx: Ctx) -> bool:
        """Free the slot now (the transaction is final); waiters are woken."""
        return ctx.release(self.key)

    # --- internals ----------------------------------------------------------------------

    def _sign_record_send(self, ctx: Ctx, tx: Mapping[str, Any]) -> TxRecord:
        slot = _free_slot(ctx.progress, TX_SLOTS)
        if slot is None:
            raise Stall(
                f"all {len(TX_SLOTS)} transaction slots of this instance are used",
                code="tx_slots_exhausted",
            )
        signed = self.signer.sign_transaction(tx)
        record = TxRecord.of(tx, signed, signed_at=self._clock())
        # Write-ahead: the bytes and hash are durable before the node sees them, so a
        # crash right after the broadcast leaves a hash to check, never a blind resend.
        ctx.save(**{slot: record.model_dump()})
        log.info("%s: recorded %s (nonce %d) in %s", self.key, record.tx_hash, record.nonce, slot)
        self._broadcast(ctx, record)
        return record

    def _rebroadcast(self, ctx: Ctx, latest: TxRecord) -> None:
        times = sum(1 for r in resends(ctx.progress) if r.tx_hash == latest.tx_hash)
        slot = _free_slot(ctx.progress, RESEND_SLOTS)
        if times >= self.settings.max_rebroadcasts or slot is None:
            raise Stall(
                f"the node lost transaction {latest.tx_hash} (nonce {latest.nonce}) again "
                f"after {times} re-broadcast(s) (max_rebroadcasts="
                f"{self.settings.max_rebroadcasts}); not sent again: every retry checks "
                "its fate first",
                code="tx_dropped",
            )
        log.info(
            "%s: %s unknown to the node, nonce %d free: re-broadcasting the recorded bytes (%d)",
            self.key,
            latest.tx_hash,
            latest.nonce,
            times + 1,
        )
        # Counted once sent, unlike a first send (whose bytes must be durable before the
        # node sees them): these bytes are recorded already, so sending them again is
        # harmless, and the bound is on what the node lost. Written ahead, a re-broadcast
        # that a crash cut short before it went out counted as one the node lost, and
        # after max_rebroadcasts such crashes the step STALLED with tx_dropped where an
        # uncrashed run completed (found by tests/property/test_chain_workflow.py).
        self._broadcast(ctx, latest)
        ctx.save(**{slot: Resend(tx_hash=latest.tx_hash, at=self._clock()).model_dump()})

    def _broadcast(self, ctx: Ctx, record: TxRecord) -> None:
        _BROADCASTS.mark(record.tx_hash, self._clock())
        try:
            self.client.send_raw(record.raw_hex)
        except AlreadyKnown:
            pass  # these exact bytes are in the pool or mined: that is what we want
        except NonceTooLow:
            # Reconcile before deciding: if one of our hashes is known, it used the nonce.
            if self.fate(ctx.progress).kind in ("confirmed", "reverted", "pending"):
                return
            raise
        log.info("%s: broadcast %s (nonce %d)", self.key, record.tx_hash, record.nonce)

    def _bump(self, ctx: Ctx, latest: TxRecord) -> TxRecord:
        bumped = self.client.bump_fees(latest.unsigned(), factor=self.settings.bump_factor)
        log.info(
            "%s: %s stuck; replacing (fees %d/%d -> %d/%d)",
            self.key,
            latest.tx_hash,
            latest.max_fee_per_gas,
            latest.max_priority_fee_per_gas,
            bumped["maxFeePerGas"],
            bumped["maxPriorityFeePerGas"],
        )
        return self._sign_record_send(ctx, bumped)


def _free_slot(progress: BaseModel, slots: tuple[str, ...]) -> str | None:
    for name in slots:
        if getattr(progress, name, None) is None:
            return name
    return None


def _record_of(records: list[TxRecord], verdict: TxVerdict) -> TxRecord:
    for record in records:
        if record.tx_hash == verdict.tx_hash:
            return record
    return records[-1]
