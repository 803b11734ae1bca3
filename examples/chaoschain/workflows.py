"""ChaosChain workflows: WorkSubmission, ScoreSubmission, CloseEpoch (seed 002).

Each is an explicit state machine over the ChaosChain contract::

    WorkSubmission:  UPLOAD_EVIDENCE -> SUBMIT_ONCHAIN -> AWAIT_TX_CONFIRM -> COMPLETED
    ScoreSubmission:                    SUBMIT_ONCHAIN -> AWAIT_TX_CONFIRM -> COMPLETED
    CloseEpoch:                         SUBMIT_ONCHAIN -> AWAIT_TX_CONFIRM -> COMPLETED

(``AWAIT_TX_CONFIRM`` may go back to ``SUBMIT_ONCHAIN`` when the transaction is lost:
dropped from the pool, or reorged out before it was deep enough.)

The seed's per-step failure table, and where each row is handled:

==================  ===========================  ============================================
step                failure                      behaviour
==================  ===========================  ============================================
UPLOAD_EVIDENCE     network error                ``GatewayUnavailable`` -> Retry with backoff
UPLOAD_EVIDENCE     Arweave rejects (invalid)    ``InvalidTransaction`` -> FAILED
UPLOAD_EVIDENCE     Arweave rejects (no funds)   ``InsufficientFunds`` -> STALLED
SUBMIT_ONCHAIN      nonce too low                the queue checks our hashes; if none used
                                                 the nonce -> Retry: the step re-checks the
                                                 contract, then signs with a fresh nonce
SUBMIT_ONCHAIN      revert "already submitted"   the view is read at depth -> COMPLETED
SUBMIT_ONCHAIN      revert "epoch closed"        FAILED (code ``epoch_closed``)
AWAIT_TX_CONFIRM    tx pending                   Snooze: checked again, no failure counted
AWAIT_TX_CONFIRM    not found after timeout      -> SUBMIT_ONCHAIN: the recorded bytes are
                                                 broadcast again (or a fresh nonce signed
                                                 if another transaction used it)
==================  ===========================  ============================================

An RPC that cannot be reached is retried with backoff and then STALLED (never FAILED).

The reconcile hook (runner start-up for RUNNING/STALLED instances, a step in doubt after
a crash, a step timeout) applies the seed's rules: a recorded tx hash is a checkpoint
whose fate is checked first (every hash, fee bumps included); on-chain wins (the
contract view, read at the confirmation depth, says the effect is there: COMPLETED); no
hash means nothing was sent; an Arweave id means the content exists (unless the gateway
does not know it: then the recorded transaction is posted again, never a new one).

Dependencies (``Runner(..., dependencies=...)``): ``eth`` (EthereumClient),
``arweave`` (ArweaveClient with a wallet), ``signers`` (address, lowercase -> Signer) and
``chaoschain`` (:class:`ChaosChainSettings`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any, ClassVar, TypeVar

from eth_utils.address import is_checksum_address, to_checksum_address
from eth_utils.crypto import keccak
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from web3.contract import Contract

from examples.contracts import chaoschain_artifact
from statemachine_wf import (
    COMPLETED,
    Fail,
    ReconcileContext,
    Reconciliation,
    Retry,
    RetryPolicy,
    Snooze,
    Stall,
    StepContext,
    Workflow,
    reconcile,
    step,
)
from statemachine_wf.adapters.arweave import ArweaveClient, PreparedTx, WalletError
from statemachine_wf.adapters.arweave import GatewayUnavailable as ArGatewayUnavailable
from statemachine_wf.adapters.arweave import InsufficientFunds as ArInsufficientFunds
from statemachine_wf.adapters.arweave import InvalidTransaction as ArInvalidTransaction
from statemachine_wf.adapters.arweave import TransactionNotFound as ArTransactionNotFound
from statemachine_wf.adapters.ethereum import (
    AlreadyKnown,
    ConfirmationRule,
    ConfirmationTimeout,
    EthereumClient,
    InsufficientFunds,
    NonceTooLow,
    ReplacementUnderpriced,
    Reverted,
    RpcUnavailable,
    Signer,
    SignerError,
)
from statemachine_wf.adapters.ethereum.txqueue import (
    DEFAULT_CONFIRMATIONS,
    QueueSettings,
    TxQueue,
    TxQueueProgress,
    tx_records,
)
from statemachine_wf.reconcilers.arweave import upload_fate
from statemachine_wf.reconcilers.ethereum import epoch_closed, score_submitted, work_evidence
from statemachine_wf.workflow import ErrorMap

__all__ = [
    "SEED_RETRY",
    "ChainProgress",
    "ChaosChainSettings",
    "CloseEpoch",
    "CloseInput",
    "ScoreInput",
    "ScoreSubmission",
    "WorkInput",
    "WorkProgress",
    "WorkSubmission",
    "data_hash_of",
]

# --- input validation: malformed input is refused before anything is written -------------

_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
_BYTES32 = re.compile(r"^0x[0-9a-fA-F]{64}$")


def _address(value: str) -> str:
    if not _ADDRESS.match(value):
        raise ValueError("not an address: 0x followed by 40 hex digits expected")
    digits = value[2:]
    # Mixed case is an EIP-55 checksum: a typo in it must not pass as another address.
    if digits != digits.lower() and digits != digits.upper() and not is_checksum_address(value):
        raise ValueError("address has a wrong EIP-55 checksum (mixed case)")
    if int(digits, 16) == 0:
        raise ValueError("the zero address is not allowed")
    return str(to_checksum_address(value))


def _bytes32(value: str) -> str:
    if not _BYTES32.match(value):
        raise ValueError("not a 32-byte hash: 0x followed by 64 hex digits expected")
    return value.lower()


Address = Annotated[str, AfterValidator(_address)]
Bytes32 = Annotated[str, AfterValidator(_bytes32)]


def data_hash_of(evidence: str) -> str:
    """The ``data_hash`` of a piece of evidence: keccak-256 of its UTF-8 bytes, 0x-hex."""
    return "0x" + keccak(evidence.encode()).hex()


class StudioInput(BaseModel):
    """Who acts, where: fields every ChaosChain workflow has. Immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    studio_address: Address
    epoch: int = Field(ge=0, lt=2**64)
    signer_address: Address


class WorkInput(StudioInput):
    """Submit a piece of work: its evidence goes to Arweave, its hash on chain."""

    data_hash: Bytes32
    evidence: str = Field(min_length=1, max_length=1_000_000)

    @model_validator(mode="after")
    def _hash_matches(self) -> WorkInput:
        # The on-chain record must point at exactly the content uploaded.
        if data_hash_of(self.evidence) != self.data_hash:
            raise ValueError("data_hash is not the keccak-256 of the evidence")
        return self


class ScoreInput(StudioInput):
    """Score a submitted piece of work (0-100)."""

    data_hash: Bytes32
    score: int = Field(ge=0, le=100)


class CloseInput(StudioInput):
    """Close an epoch of a studio."""


class ChainProgress(TxQueueProgress):
    """What the run learned on chain; every field is set once.

    Attributes:
        onchain_tx_hash: Our transaction that did it (confirmed at depth).
        onchain_confirmed: Set only once the confirmation depth is reached.
        onchain_block: The block it was mined in.
        already_on_chain: The effect was found on chain, done by another path (or our
            own transaction reverted because it was).
    """

    onchain_tx_hash: str | None = None
    onchain_confirmed: bool | None = None
    onchain_block: int | None = None
    already_on_chain: bool | None = None


class WorkProgress(ChainProgress):
    """WorkSubmission's progress: the upload, then the chain.

    Attributes:
        arweave_tx_id: The upload's id, saved before it is posted.
        arweave_record: The signed upload (public fields), to post the very same
            transaction again after a crash instead of paying for a second one.
        arweave_reward: Its fee in winston.
        arweave_confirmed: The gateway had it in a block when the step ended.
    """

    arweave_tx_id: str | None = None
    arweave_record: dict[str, Any] | None = None
    arweave_reward: int | None = None
    arweave_confirmed: bool | None = None


@dataclass(frozen=True)
class ChaosChainSettings:
    """Where the contract is and how the workflows wait.

    Attributes:
        contract_address: The deployed ChaosChain.
        confirmations: Depth before ``onchain_confirmed`` (and for views: "on-chain wins"
            only counts effects this deep); the queue's default, ``DEFAULT_CONFIRMATIONS``.
        poll_interval: Seconds between checks of a pending transaction.
        stuck_after: Seconds in the pool before a fee bump.
        not_found_after: Seconds a transaction may be unknown to the node before it is
            submitted again, counted from its last broadcast by this process.
        stall_retry: Seconds before a STALLED step (no funds, unknown work) is retried.
        arweave_tags: Tags on every evidence upload (ASCII).
    """

    contract_address: str
    confirmations: ConfirmationRule = DEFAULT_CONFIRMATIONS
    poll_interval: float = 1.0
    stuck_after: float = 30.0
    not_found_after: float = 10.0
    stall_retry: float = 60.0
    arweave_tags: Mapping[str, str] = field(default_factory=lambda: {"App-Name": "ChaosChain"})

    @cached_property
    def abi(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(chaoschain_artifact().abi)

    @property
    def queue(self) -> QueueSettings:
        return QueueSettings(
            confirmations=self.confirmations,
            poll_interval=self.poll_interval,
            stuck_after=self.stuck_after,
            not_found_after=self.not_found_after,
        )


SEED_RETRY = RetryPolicy(
    max_attempts=5, initial_delay=1.0, max_delay=60.0, multiplier=2.0, jitter=True
)
"""The seed's policy: 1 s, 2 s, 4 s, 8 s, 16 s, then STALLED (auto-retried later)."""

SUBMIT = "SUBMIT_ONCHAIN"
AWAIT = "AWAIT_TX_CONFIRM"
UPLOAD = "UPLOAD_EVIDENCE"

InputT = TypeVar("InputT", bound=StudioInput)
ProgressT = TypeVar("ProgressT", bound=ChainProgress)


class ChainWorkflow(Workflow[InputT, ProgressT]):
    """The shared submit -> await-confirmation machinery and reconcile hook.

    A subclass says which contract call it makes (:meth:`call`), how to see that its
    effect is already on chain (:meth:`already_done`), and which revert reasons mean
    "done" or "wait"; every other revert is FAILED.
    """

    __abstract__ = True
    retry_policy = SEED_RETRY
    errors: ClassVar[ErrorMap] = {
        RpcUnavailable: Retry,
        NonceTooLow: Retry,
        ReplacementUnderpriced: Retry,
        AlreadyKnown: Retry,
        ConfirmationTimeout: Retry,
        InsufficientFunds: Stall,
        SignerError: Fail,
        ArGatewayUnavailable: Retry,
        ArTransactionNotFound: Retry,
        ArInsufficientFunds: Stall,
        ArInvalidTransaction: Fail,
        WalletError: Fail,
    }
    done_reasons: ClassVar[frozenset[str]] = frozenset({"already submitted"})
    """Revert reasons that mean the effect is already on chain."""
    stall_reasons: ClassVar[frozenset[str]] = frozenset()
    """Revert reasons that mean "not yet possible": STALLED, retried later."""

    eth: EthereumClient
    arweave: ArweaveClient
    signers: Mapping[str, Signer]
    chaoschain: ChaosChainSettings

    # --- what a subclass provides -----------------------------------------------------

    def call(self, inp: InputT, progress: ProgressT) -> tuple[str, tuple[Any, ...]]:
        """The contract function and its arguments."""
        raise NotImplementedError

    def already_done(self, inp: InputT) -> dict[str, Any] | None:
        """Evidence that the effect is on chain at the confirmation depth, or None."""
        raise NotImplementedError

    # --- shared pieces ----------------------------------------------------------------

    @property
    def contract(self) -> Contract:
        return self.eth.contract(self.chaoschain.contract_address, self.chaoschain.abi)

    def queue(self, inp: InputT) -> TxQueue:
        signer = self.signers.get(inp.signer_address.lower())
        if signer is None:
            raise Fail(f"this runner has no signer for {inp.signer_address}", code="unknown_signer")
        return TxQueue(self.eth, signer, self.chaoschain.queue)

    def submit_onchain(self, ctx: StepContext[InputT, ProgressT]) -> str:
        """SUBMIT_ONCHAIN: send the transaction through the signer's queue."""
        queue = self.queue(ctx.input)
        records = tx_records(ctx.progress)
        in_flight = bool(records) and queue.fate(ctx.progress).kind in (
            "confirmed",
            "reverted",
            "pending",
        )
        if not in_flight:
            # Precondition first (idempotent action): on chain already means done.
            found = self.already_done(ctx.input)
            if found is not None:
                ctx.set(already_on_chain=True)
                return COMPLETED
        fn, args = self.call(ctx.input, ctx.progress)
        try:
            queue.submit(
                ctx,
                lambda nonce: self.eth.build_call(
                    self.contract, fn, *args, sender=ctx.input.signer_address, nonce=nonce
                ),
            )
        except Reverted as exc:  # seen while estimating gas: nothing was recorded or sent
            return self.reverted(ctx, exc.reason)
        return AWAIT

    def await_confirm(self, ctx: StepContext[InputT, ProgressT]) -> str:
        """AWAIT_TX_CONFIRM: wait (Snooze) until the transaction is final at depth."""
        queue = self.queue(ctx.input)
        verdict = queue.await_final(ctx)
        if verdict.kind == "confirmed":
            ctx.set(
                onchain_tx_hash=verdict.tx_hash,
                onchain_confirmed=True,
                onchain_block=verdict.block_number,
            )
            queue.release(ctx)  # final: the next transaction of this signer may go
            return COMPLETED
        if verdict.kind == "reverted":
            return self.reverted(ctx, verdict.revert_reason)
        # Lost (dropped, or reorged out before it was deep enough), or its nonce was
        # taken: back to SUBMIT_ONCHAIN, which re-checks the contract and resends.
        return SUBMIT

    def reverted(self, ctx: StepContext[InputT, ProgressT], reason: str | None) -> str:
        """Apply the failure table to a revert reason."""
        if reason in self.done_reasons:
            # Reconcile: on-chain wins, but only once the effect is deep enough.
            if self.already_done(ctx.input) is not None:
                ctx.set(already_on_chain=True)
                return COMPLETED
            raise Snooze(
                self.chaoschain.poll_interval,
                f"reverted {reason!r}; waiting for the effect to reach the confirmation depth",
            )
        code = re.sub(r"[^a-z0-9]+", "_", (reason or "reverted").lower()).strip("_")
        if reason in self.stall_reasons:
            raise Stall(f"contract says: {reason}", code=code, retry_in=self.chaoschain.stall_retry)
        raise Fail(f"contract reverted: {reason}", code=code)

    @reconcile
    def check_chain(self, ctx: ReconcileContext[InputT, ProgressT]) -> Reconciliation:
        """Where is this instance really? Ask the chain (and Arweave) before anything."""
        queue = self.queue(ctx.input)
        records = tx_records(ctx.progress)
        evidence: dict[str, Any] = {}
        if records:  # a tx hash is a checkpoint: its fate first
            verdict = queue.fate(ctx.progress)
            evidence = verdict.evidence()
            if verdict.kind == "confirmed":
                return ctx.complete(
                    progress={
                        "onchain_tx_hash": verdict.tx_hash,
                        "onchain_confirmed": True,
                        "onchain_block": verdict.block_number,
                    },
                    **evidence,
                )
            if verdict.kind in ("pending", "reverted"):
                return _move(ctx, AWAIT, **evidence)
        found = self.already_done(ctx.input)
        if found is not None:  # on-chain wins
            return ctx.complete(progress={"already_on_chain": True}, **found, **evidence)
        if records:  # never mined and nobody did it: submit again
            return _move(ctx, SUBMIT, **evidence)
        return self.before_chain(ctx)

    def before_chain(self, ctx: ReconcileContext[InputT, ProgressT]) -> Reconciliation:
        """Reconcile a step with no transaction recorded: nothing was sent."""
        if ctx.step == AWAIT:
            return ctx.goto(SUBMIT, tx="no transaction recorded")
        return ctx.rerun(tx="no transaction recorded: nothing was sent")


def _move(ctx: ReconcileContext[Any, Any], target: str, **evidence: Any) -> Reconciliation:
    if ctx.step == target:
        return ctx.rerun(**evidence)
    return ctx.goto(target, **evidence)


class WorkSubmission(ChainWorkflow[WorkInput, WorkProgress]):
    """Upload the evidence to Arweave, then ``submitWork`` on chain, once."""

    workflow_type = "chaoschain.work_submission.v1"

    def call(self, inp: WorkInput, progress: WorkProgress) -> tuple[str, tuple[Any, ...]]:
        if progress.arweave_tx_id is None:  # the state machine makes this unreachable
            raise Fail("no evidence uploaded", code="no_evidence")
        data_hash = bytes.fromhex(inp.data_hash[2:])
        evidence_id = f"ar://{progress.arweave_tx_id}"
        return "submitWork", (inp.studio_address, inp.epoch, data_hash, evidence_id)

    def already_done(self, inp: WorkInput) -> dict[str, Any] | None:
        found = work_evidence(
            self.eth,
            self.contract,
            inp.studio_address,
            inp.epoch,
            inp.data_hash,
            confirmations=self.chaoschain.confirmations,
        )
        if found is None:
            return None
        return {"work_submitted": True, "submitter": found[0], "evidence_id": found[1]}

    @step(name=UPLOAD, initial=True, to=SUBMIT)
    def upload_evidence(self, ctx: StepContext[WorkInput, WorkProgress]) -> str:
        """Post the evidence to Arweave; its id is saved before the post."""
        data = ctx.input.evidence.encode()
        recorded = ctx.progress.arweave_record
        if recorded is None:
            tags = {
                **self.chaoschain.arweave_tags,
                "Data-Hash": ctx.input.data_hash,
                "Studio": ctx.input.studio_address,
                "Epoch": str(ctx.input.epoch),
            }
            prepared = self.arweave.prepare(data, tags)
            # Write-ahead: a signature is randomised, so preparing again after a crash
            # would be a second, separately paid upload. The record is all a re-post needs.
            ctx.save(
                arweave_tx_id=prepared.tx_id,
                arweave_record=prepared.to_record(),
                arweave_reward=prepared.reward,
            )
        else:
            verdict = upload_fate(self.arweave, str(ctx.progress.arweave_tx_id))
            if verdict.exists:  # posted before a crash: the content exists
                if verdict.kind == "confirmed":
                    ctx.set(arweave_confirmed=True)
                return SUBMIT
            prepared = PreparedTx.from_record(recorded, data)
        self.arweave.post(prepared)
        return SUBMIT

    @step(name=SUBMIT, to=(AWAIT, COMPLETED))
    def submit(self, ctx: StepContext[WorkInput, WorkProgress]) -> str:
        """Send ``submitWork`` through the signer's queue."""
        return self.submit_onchain(ctx)

    @step(name=AWAIT, to=(SUBMIT, COMPLETED))
    def await_tx(self, ctx: StepContext[WorkInput, WorkProgress]) -> str:
        """Wait for the transaction to be final at the confirmation depth."""
        return self.await_confirm(ctx)

    def before_chain(self, ctx: ReconcileContext[WorkInput, WorkProgress]) -> Reconciliation:
        if ctx.step != UPLOAD:
            return super().before_chain(ctx)
        tx_id = ctx.progress.arweave_tx_id
        if tx_id is None:
            return ctx.rerun(upload="no arweave id recorded: nothing was posted")
        verdict = upload_fate(self.arweave, tx_id)
        if verdict.exists:  # Arweave is append-only: the content exists
            progress = {"arweave_confirmed": True} if verdict.kind == "confirmed" else {}
            return ctx.goto(SUBMIT, progress=progress, **verdict.evidence())
        return ctx.rerun(**verdict.evidence())  # the step posts the recorded tx again


class ScoreSubmission(ChainWorkflow[ScoreInput, ChainProgress]):
    """``submitScore`` once per (work, scorer); waits (STALLED) while the work is unknown."""

    workflow_type = "chaoschain.score_submission.v1"
    stall_reasons = frozenset({"unknown work"})

    def call(self, inp: ScoreInput, progress: ChainProgress) -> tuple[str, tuple[Any, ...]]:
        data_hash = bytes.fromhex(inp.data_hash[2:])
        return "submitScore", (inp.studio_address, inp.epoch, data_hash, inp.score)

    def already_done(self, inp: ScoreInput) -> dict[str, Any] | None:
        done = score_submitted(
            self.eth,
            self.contract,
            inp.studio_address,
            inp.epoch,
            inp.data_hash,
            inp.signer_address,
            confirmations=self.chaoschain.confirmations,
        )
        return {"score_submitted": True} if done else None

    @step(name=SUBMIT, initial=True, to=(AWAIT, COMPLETED))
    def submit(self, ctx: StepContext[ScoreInput, ChainProgress]) -> str:
        """Send ``submitScore`` through the signer's queue."""
        return self.submit_onchain(ctx)

    @step(name=AWAIT, to=(SUBMIT, COMPLETED))
    def await_tx(self, ctx: StepContext[ScoreInput, ChainProgress]) -> str:
        """Wait for the transaction to be final at the confirmation depth."""
        return self.await_confirm(ctx)


class CloseEpoch(ChainWorkflow[CloseInput, ChainProgress]):
    """``closeEpoch`` once; an epoch found closed is done (whoever closed it)."""

    workflow_type = "chaoschain.close_epoch.v1"
    done_reasons = frozenset({"epoch closed"})

    def call(self, inp: CloseInput, progress: ChainProgress) -> tuple[str, tuple[Any, ...]]:
        return "closeEpoch", (inp.studio_address, inp.epoch)

    def already_done(self, inp: CloseInput) -> dict[str, Any] | None:
        closed = epoch_closed(
            self.eth,
            self.contract,
            inp.studio_address,
            inp.epoch,
            confirmations=self.chaoschain.confirmations,
        )
        return {"epoch_closed": True} if closed else None

    @step(name=SUBMIT, initial=True, to=(AWAIT, COMPLETED))
    def submit(self, ctx: StepContext[CloseInput, ChainProgress]) -> str:
        """Send ``closeEpoch`` through the signer's queue."""
        return self.submit_onchain(ctx)

    @step(name=AWAIT, to=(SUBMIT, COMPLETED))
    def await_tx(self, ctx: StepContext[CloseInput, ChainProgress]) -> str:
        """Wait for the transaction to be final at the confirmation depth."""
        return self.await_confirm(ctx)
