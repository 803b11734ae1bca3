"""An Arweave evidence step: sign once, save before posting, re-post never re-sign.

Mix :class:`ArweaveEvidence` into a workflow (before the chain building block) and say
what to upload::

    class Submit(ArweaveEvidence, ContractCall[SubmitInput, SubmitProgress]):
        def evidence(self, inp: SubmitInput) -> bytes:
            return inp.report.encode()

        def arguments(self, inp, progress):
            return inp.ref, f"ar://{self.evidence_id(progress)}"

The class gets the initial step ``UPLOAD_EVIDENCE`` (-> ``evidence_next``, by default
``SUBMIT_ONCHAIN``) and its reconciliation:

==================  ===========================  ============================================
step                failure                      behaviour
==================  ===========================  ============================================
UPLOAD_EVIDENCE     network error                ``GatewayUnavailable`` -> Retry with backoff
UPLOAD_EVIDENCE     Arweave rejects (invalid)    ``InvalidTransaction`` -> FAILED
UPLOAD_EVIDENCE     Arweave rejects (no funds)   ``InsufficientFunds`` -> STALLED
UPLOAD_EVIDENCE     the anchor expired           (the refusal says so, or the anchor's
                                                 block is ``ANCHOR_DEPTH`` deep) the old id
                                                 is checked (unknown to the gateway, so
                                                 never mined); only then a new transaction
                                                 is signed, saved, posted
==================  ===========================  ============================================

The signed record (public fields only) is saved *before* the post: a signature is
randomised, so preparing again after a crash would be a second, separately paid upload.
A recorded id the gateway knows means the content exists; one it does not know is posted
again from the record (same id). The progress model inherits :class:`EvidenceProgress`.
Dependency: ``arweave`` (:class:`ArweaveClient` with a wallet).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel

from statemachine_wf import (
    Fail,
    ReconcileContext,
    Reconciliation,
    Retry,
    Stall,
    StepContext,
    Waiting,
    step,
)

from .client import ArweaveClient
from .errors import (
    GatewayUnavailable,
    InsufficientFunds,
    InvalidTransaction,
    TransactionNotFound,
    WalletError,
)
from .fate import UploadVerdict, upload_fate
from .transaction import PreparedTx

__all__ = [
    "ARWEAVE_ERRORS",
    "UPLOAD_EVIDENCE",
    "ArweaveEvidence",
    "EvidenceProgress",
    "EvidenceRecord",
    "anchor_expired",
]

UPLOAD_EVIDENCE = "UPLOAD_EVIDENCE"

ARWEAVE_ERRORS: Mapping[type[BaseException], type[Retry] | type[Stall] | type[Fail] | type[Waiting]]
ARWEAVE_ERRORS = {
    GatewayUnavailable: Retry,
    TransactionNotFound: Retry,
    InsufficientFunds: Stall,
    InvalidTransaction: Fail,
    WalletError: Fail,
}
"""The seed's failure table for the upload."""

REANCHOR_SLOTS = ("arweave_reanchored_1", "arweave_reanchored_2")


class EvidenceRecord(BaseModel):
    """A re-prepared upload (its anchor expired before it could be posted)."""

    tx_id: str
    record: dict[str, Any]
    reward: int


class EvidenceProgress(BaseModel):
    """The upload's progress fields; inherit them in a workflow's progress model.

    Attributes:
        arweave_tx_id: The upload's id, saved before it is posted.
        arweave_record: The signed upload (public fields), to post the very same
            transaction again after a crash instead of paying for a second one.
        arweave_reward: Its fee in winston.
        arweave_confirmed: The gateway had it in a block when the step ended.
        arweave_reanchored_1: A replacement signed after the first one's anchor expired
            (and the gateway did not know it); ``_2`` likewise.
    """

    arweave_tx_id: str | None = None
    arweave_record: dict[str, Any] | None = None
    arweave_reward: int | None = None
    arweave_confirmed: bool | None = None
    arweave_reanchored_1: EvidenceRecord | None = None
    arweave_reanchored_2: EvidenceRecord | None = None


def anchor_expired(exc: InvalidTransaction) -> bool:
    """Whether a gateway refused a post because its anchor (``last_tx``) is too old."""
    text = f"{exc} {getattr(exc, 'body', '') or ''}".lower()
    return "anchor" in text or "last_tx" in text


def _uploads(progress: Any) -> list[EvidenceRecord]:
    """Every upload recorded, oldest first."""
    out: list[EvidenceRecord] = []
    first = getattr(progress, "arweave_tx_id", None)
    if first is not None and getattr(progress, "arweave_record", None) is not None:
        out.append(
            EvidenceRecord(
                tx_id=first,
                record=progress.arweave_record,
                reward=int(progress.arweave_reward or 0),
            )
        )
    for slot in REANCHOR_SLOTS:
        value = getattr(progress, slot, None)
        if value is not None:
            out.append(EvidenceRecord.model_validate(value))
    return out


class ArweaveEvidence:
    """Mixin: an initial ``UPLOAD_EVIDENCE`` step before the rest of the workflow.

    Declare :meth:`evidence` (the bytes) and optionally :meth:`evidence_tags`; read the
    id with :meth:`evidence_id`. ``evidence_next`` names the step that follows.
    """

    evidence_next: ClassVar[str] = "SUBMIT_ONCHAIN"
    chain_is_first: ClassVar[bool] = False
    arweave: ArweaveClient

    def __init_subclass__(cls, **kwargs: Any) -> None:
        if cls.evidence_next != ArweaveEvidence.evidence_next and (
            "upload_evidence" not in cls.__dict__
        ):

            def upload_evidence(self: ArweaveEvidence, ctx: StepContext[Any, Any]) -> str:
                return str(ArweaveEvidence.upload_evidence(self, ctx))

            marked = step(
                name=UPLOAD_EVIDENCE, initial=True, to=cls.evidence_next, errors=ARWEAVE_ERRORS
            )(upload_evidence)
            cls.upload_evidence = marked  # type: ignore[method-assign]
        super().__init_subclass__(**kwargs)

    def evidence(self, inp: Any) -> bytes:
        """The bytes to upload."""
        raise NotImplementedError(f"{type(self).__name__} must define evidence()")

    def evidence_tags(self, inp: Any) -> Mapping[str, str]:
        """Tags on the upload (ASCII)."""
        return {}

    @staticmethod
    def evidence_id(progress: Any) -> str:
        """The id of the upload that counts (the latest prepared)."""
        uploads = _uploads(progress)
        if not uploads:  # the state machine makes this unreachable
            raise Fail("no evidence uploaded", code="no_evidence")
        return uploads[-1].tx_id

    @step(name=UPLOAD_EVIDENCE, initial=True, to="SUBMIT_ONCHAIN", errors=ARWEAVE_ERRORS)
    def upload_evidence(self, ctx: StepContext[Any, Any]) -> str:
        """UPLOAD_EVIDENCE: post the evidence; its signed record is saved before the post."""
        data = self.evidence(ctx.input)
        uploads = _uploads(ctx.progress)
        if not uploads:
            prepared = self.arweave.prepare(data, self.evidence_tags(ctx.input))
            ctx.save(
                arweave_tx_id=prepared.tx_id,
                arweave_record=prepared.to_record(),
                arweave_reward=prepared.reward,
            )
        else:
            verdict = upload_fate(self.arweave, uploads[-1].tx_id)
            if verdict.exists:  # posted before a crash: the content exists
                return self._uploaded(ctx, verdict)
            prepared = PreparedTx.from_record(uploads[-1].record, data)
        try:
            self.arweave.post(prepared)
        except InvalidTransaction as exc:
            # A gateway may say why (the text), or only refuse: then the anchor's age is
            # asked; any other refusal stays what it is (FAILED).
            anchor = str(prepared.header.get("last_tx") or "")
            if not (anchor_expired(exc) or self.arweave.anchor_too_old(anchor)):
                raise
            return self._reanchor(ctx, data, prepared.tx_id, exc)
        return self.evidence_next

    def _uploaded(self, ctx: StepContext[Any, Any], verdict: UploadVerdict) -> str:
        if verdict.kind == "confirmed" and ctx.progress.arweave_confirmed is None:
            ctx.set(arweave_confirmed=True)
        return self.evidence_next

    def _reanchor(
        self, ctx: StepContext[Any, Any], data: bytes, old_id: str, exc: InvalidTransaction
    ) -> str:
        # The old transaction can never be mined now; sign anew only if the gateway does
        # not hold it (else the content exists and nothing more is paid).
        verdict = upload_fate(self.arweave, old_id)
        if verdict.exists:
            return self._uploaded(ctx, verdict)
        slot = next((s for s in REANCHOR_SLOTS if getattr(ctx.progress, s, None) is None), None)
        if slot is None:
            raise Stall(f"arweave anchor expired again: {exc}", code="arweave_anchor_expired")
        prepared = self.arweave.prepare(data, self.evidence_tags(ctx.input))
        record = EvidenceRecord(
            tx_id=prepared.tx_id, record=prepared.to_record(), reward=prepared.reward
        )
        ctx.save(**{slot: record.model_dump()})
        self.arweave.post(prepared)
        return self.evidence_next

    def reconcile_step(self, ctx: ReconcileContext[Any, Any]) -> Reconciliation:
        """Reconcile ``UPLOAD_EVIDENCE``: an id the gateway knows means the content exists."""
        if ctx.step != UPLOAD_EVIDENCE:
            return ctx.rerun()
        uploads = _uploads(ctx.progress)
        if not uploads:
            return ctx.rerun(upload="no arweave id recorded: nothing was posted")
        verdict = upload_fate(self.arweave, uploads[-1].tx_id)
        if verdict.exists:  # Arweave is append-only: the content exists
            progress = {"arweave_confirmed": True} if verdict.kind == "confirmed" else {}
            return ctx.goto(self.evidence_next, progress=progress, **verdict.evidence())
        return ctx.rerun(**verdict.evidence())  # the step posts the recorded tx again
