"""ChaosChain workflows: WorkSubmission, ScoreSubmission, CloseEpoch (seed 002).

Each is a declared contract call on the library's building blocks
(:class:`~statemachine_wf.adapters.ethereum.steps.ContractCall`, and
:class:`~statemachine_wf.adapters.arweave.steps.ArweaveEvidence` for the upload)::

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

All of it is the building blocks' default behaviour: the classes below declare only the
contract call, its "already done?" view and the revert reasons that differ (ScoreSubmission
stalls on "unknown work"; CloseEpoch is done on "epoch closed"). The reconcile hook comes
with the blocks: a recorded tx hash is a checkpoint checked first (every hash, fee bumps
included); on-chain wins (the view, read at the confirmation depth); no hash means nothing
was sent; an Arweave id means the content exists (unless the gateway does not know it:
then the recorded transaction is posted again, never a new one).

Dependencies (``Runner(..., dependencies=...)``): ``eth`` (EthereumClient),
``arweave`` (ArweaveClient with a wallet), ``signers`` (address, lowercase -> Signer) and
``chaoschain`` (:class:`ChaosChainSettings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from examples.contracts import chaoschain_artifact
from statemachine_wf.adapters.arweave.steps import ArweaveEvidence, EvidenceProgress
from statemachine_wf.adapters.ethereum.steps import (
    SEED_RETRY,
    ChainSettings,
    ContractCall,
    view_check,
)
from statemachine_wf.adapters.ethereum.steps import TxProgress as ChainProgress
from statemachine_wf.adapters.ethereum.types import Address, Bytes32, b32, keccak_hex

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

data_hash_of = keccak_hex
"""The ``data_hash`` of a piece of evidence: keccak-256 of its UTF-8 bytes, 0x-hex."""


@dataclass(frozen=True, kw_only=True)
class ChaosChainSettings(ChainSettings):
    """Where the contract is; how the workflows wait (:class:`ChainSettings`, one default
    depth for receipts and views); the tags on every evidence upload."""

    contract_address: str
    arweave_tags: Mapping[str, str] = field(default_factory=lambda: {"App-Name": "ChaosChain"})


class StudioInput(BaseModel):
    """Who acts, where: fields every ChaosChain workflow has. Immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    studio_address: Address
    epoch: int = Field(ge=0, lt=2**64)
    signer_address: Address


InputT = TypeVar("InputT", bound=StudioInput)
ProgressT = TypeVar("ProgressT", bound=ChainProgress)


class ChaosChainCall(ContractCall[InputT, ProgressT]):
    """The ChaosChain contract, from the artifact and the ``chaoschain`` settings."""

    __abstract__ = True
    abi = chaoschain_artifact().abi
    chaoschain: ChaosChainSettings

    def chain_settings(self) -> ChaosChainSettings:
        return self.chaoschain

    def contract_address(self, inp: InputT) -> str:
        return self.chaoschain.contract_address


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


class WorkProgress(ChainProgress, EvidenceProgress):
    """WorkSubmission's progress: the upload (saved before it is posted), then the chain."""


class WorkSubmission(ArweaveEvidence, ChaosChainCall[WorkInput, WorkProgress]):
    """Upload the evidence to Arweave, then ``submitWork`` on chain, once."""

    workflow_type = "chaoschain.work_submission.v1"
    function = "submitWork"
    done_when = view_check(
        "workEvidence",
        lambda inp: (inp.studio_address, inp.epoch, b32(inp.data_hash)),
        done=lambda found: int(str(found[0]), 16) != 0,
        evidence=lambda found: {
            "work_submitted": True,
            "submitter": str(found[0]),
            "evidence_id": str(found[1]),
        },
    )

    def evidence(self, inp: WorkInput) -> bytes:
        return inp.evidence.encode()

    def evidence_tags(self, inp: WorkInput) -> Mapping[str, str]:
        return {
            **self.chaoschain.arweave_tags,
            "Data-Hash": inp.data_hash,
            "Studio": inp.studio_address,
            "Epoch": str(inp.epoch),
        }

    def arguments(self, inp: WorkInput, progress: WorkProgress) -> tuple[Any, ...]:
        evidence_id = f"ar://{self.evidence_id(progress)}"
        return inp.studio_address, inp.epoch, b32(inp.data_hash), evidence_id


class ScoreInput(StudioInput):
    """Score a submitted piece of work (0-100)."""

    data_hash: Bytes32
    score: int = Field(ge=0, le=100)


class ScoreSubmission(ChaosChainCall[ScoreInput, ChainProgress]):
    """``submitScore`` once per (work, scorer); waits (STALLED) while the work is unknown."""

    workflow_type = "chaoschain.score_submission.v1"
    function = "submitScore"
    stall_reasons = frozenset({"unknown work"})
    done_when = view_check(
        "scoreSubmitted",
        lambda inp: (inp.studio_address, inp.epoch, b32(inp.data_hash), inp.signer_address),
    )

    def arguments(self, inp: ScoreInput, progress: ChainProgress) -> tuple[Any, ...]:
        return inp.studio_address, inp.epoch, b32(inp.data_hash), inp.score


class CloseInput(StudioInput):
    """Close an epoch of a studio."""


class CloseEpoch(ChaosChainCall[CloseInput, ChainProgress]):
    """``closeEpoch`` once; an epoch found closed is done (whoever closed it)."""

    workflow_type = "chaoschain.close_epoch.v1"
    function = "closeEpoch"
    done_reasons = frozenset({"epoch closed"})
    done_when = view_check("epochClosed", lambda inp: (inp.studio_address, inp.epoch))

    def arguments(self, inp: CloseInput, progress: ChainProgress) -> tuple[Any, ...]:
        return inp.studio_address, inp.epoch
