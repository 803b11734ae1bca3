"""A contract transaction as declared steps: submit through the signer's queue, await depth.

An author declares *what* to call; the building block does the rest (seed 002)::

    class Pay(ContractCall[PayInput, TxProgress]):
        workflow_type = "treasury.pay.v1"
        abi = token_artifact().abi
        function = "transfer"
        done_when = view_check("paid", lambda inp: (inp.ref,))

        def contract_address(self, inp: PayInput) -> str:
            return self.treasury.token

        def arguments(self, inp: PayInput, progress: TxProgress) -> tuple[Any, ...]:
            return inp.recipient, inp.amount

The class gets two steps and a reconcile hook::

    SUBMIT_ONCHAIN -> AWAIT_TX_CONFIRM -> COMPLETED
    (AWAIT_TX_CONFIRM -> SUBMIT_ONCHAIN when the transaction is lost; either -> COMPLETED
    when the effect is found on chain)

==================  ===========================  ============================================
step                failure                      behaviour (the default)
==================  ===========================  ============================================
SUBMIT_ONCHAIN      effect already on chain      ``done_when`` read at depth -> COMPLETED,
                                                 nothing sent
SUBMIT_ONCHAIN      nonce too low                the queue checks our hashes; if none used
                                                 the nonce -> Retry: re-check, fresh nonce
SUBMIT_ONCHAIN      revert in ``done_reasons``   ``done_when`` read at depth -> COMPLETED
                                                 (Snooze until the effect is that deep)
SUBMIT_ONCHAIN      revert in ``stall_reasons``  STALLED, retried after ``stall_retry``; the
                                                 signer's slot is released (nothing sent)
SUBMIT_ONCHAIN      any other revert             FAILED, code = the reason in snake_case
SUBMIT_ONCHAIN      signer cannot pay            STALLED; the slot is released unless one
                                                 of our transactions is in the pool
AWAIT_TX_CONFIRM    tx pending                   Snooze: checked again, no failure counted
AWAIT_TX_CONFIRM    not found after timeout      -> SUBMIT_ONCHAIN: the recorded bytes are
                                                 broadcast again (or a fresh nonce signed
                                                 if another transaction used it)
AWAIT_TX_CONFIRM    mined revert                 the revert rows above
any                 RPC unreachable              Retry with backoff, then STALLED
==================  ===========================  ============================================

The reconcile hook (runner start-up, a step in doubt, a timeout): a recorded hash is a
checkpoint checked first (every hash per nonce, fee bumps included); on-chain wins at
depth (``done_when``); no hash recorded means nothing was sent. Steps before the chain
(an upload, say) are reconciled by :meth:`ContractCall.reconcile_step`.

Dependencies: ``eth`` (:class:`EthereumClient`) and ``signers`` (address, lowercase ->
:class:`Signer`). Settings come from :meth:`ContractCall.chain_settings`
(:class:`ChainSettings`: one object, one default depth).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from pydantic import BaseModel
from web3.contract import Contract

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
    Waiting,
    Workflow,
    reconcile,
    step,
)

from .client import ConfirmationRule, EthereumClient
from .errors import (
    AlreadyKnown,
    ConfirmationTimeout,
    InsufficientFunds,
    NonceTooLow,
    ReplacementUnderpriced,
    Reverted,
    RpcUnavailable,
    SignerError,
)
from .signer import Signer
from .txqueue import DEFAULT_CONFIRMATIONS, QueueSettings, TxQueue, TxQueueProgress, tx_records
from .views import events_at_depth, view

__all__ = [
    "AWAIT_TX_CONFIRM",
    "CHAIN_ERRORS",
    "DEFAULT_CONFIRMATIONS",
    "SEED_RETRY",
    "SUBMIT_ONCHAIN",
    "ChainSettings",
    "ContractCall",
    "DoneCheck",
    "ErrorRule",
    "TxProgress",
    "event_check",
    "view_check",
]

SUBMIT_ONCHAIN = "SUBMIT_ONCHAIN"
AWAIT_TX_CONFIRM = "AWAIT_TX_CONFIRM"

SEED_RETRY = RetryPolicy(
    max_attempts=5, initial_delay=1.0, max_delay=60.0, multiplier=2.0, jitter=True
)
"""The seed's policy: 1 s, 2 s, 4 s, 8 s, 16 s, then STALLED (auto-retried later)."""

ErrorRule = type[Retry] | type[Stall] | type[Fail] | type[Waiting]

CHAIN_ERRORS: Mapping[type[BaseException], ErrorRule] = {
    RpcUnavailable: Retry,
    NonceTooLow: Retry,
    ReplacementUnderpriced: Retry,
    AlreadyKnown: Retry,
    ConfirmationTimeout: Retry,
    InsufficientFunds: Stall,
    SignerError: Fail,
}
"""The seed's failure table for chain errors (class-level ``errors`` of a ContractCall)."""


@dataclass(frozen=True, slots=True)
class ChainSettings(QueueSettings):
    """How an on-chain workflow waits: the queue's settings plus the stall delay.

    One object, one default depth: ``confirmations`` defaults to
    :data:`~statemachine_wf.adapters.ethereum.txqueue.DEFAULT_CONFIRMATIONS`, for the
    receipts, the "already done?" reads and the views alike.

    Attributes:
        stall_retry: Seconds before a STALLED step (a stall revert) is retried.
    """

    stall_retry: float = 60.0

    @property
    def queue(self) -> QueueSettings:
        """The queue's settings (this object is one)."""
        return self


class TxProgress(TxQueueProgress):
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


Evidence = dict[str, Any]


class DoneCheck(Protocol):
    """ "Already done?": evidence that the effect is on chain at depth, or None."""

    def __call__(
        self, eth: EthereumClient, contract: Contract, inp: Any, confirmations: ConfirmationRule
    ) -> Evidence | None: ...


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def view_check(
    function: str,
    args: Callable[[Any], Sequence[Any]],
    *,
    done: Callable[[Any], bool] = bool,
    evidence: Callable[[Any], Mapping[str, Any]] | None = None,
) -> DoneCheck:
    """Done when the view ``function(*args(input))``, read at depth, satisfies ``done``.

    Args:
        function: The view's name.
        args: Its arguments, from the workflow's input.
        done: Whether an answer means "done" (default: truthy).
        evidence: What goes into the log when done (default ``{<view>: True}``, the
            view's name in snake_case).
    """

    def check(
        eth: EthereumClient, contract: Contract, inp: Any, confirmations: ConfirmationRule
    ) -> Evidence | None:
        answer = view(eth, contract, function, *args(inp), confirmations=confirmations)
        if answer is None or not done(answer):
            return None
        return dict(evidence(answer)) if evidence else {_snake(function): True}

    return check


def event_check(
    event: str,
    filters: Callable[[Any], Mapping[str, Any]],
    *,
    evidence: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None,
    from_block: int | Callable[[Any], int] = 0,
) -> DoneCheck:
    """Done when the contract emitted ``event`` matching ``filters(input)``, at depth.

    Args:
        event: The event's name.
        filters: Indexed arguments to match, from the workflow's input.
        evidence: What goes into the log, from the first matching log (default: its
            block and transaction hash).
        from_block: The first block searched: the contract's deployment block, or a
            function of the input (a block recorded when the work was asked for). Hosted
            nodes refuse ``eth_getLogs`` over long ranges, so the default 0 (the whole
            chain) suits a development chain only.
    """

    def check(
        eth: EthereumClient, contract: Contract, inp: Any, confirmations: ConfirmationRule
    ) -> Evidence | None:
        start = from_block(inp) if callable(from_block) else from_block
        logs = events_at_depth(
            eth, contract, event, filters(inp), confirmations=confirmations, from_block=start
        )
        if not logs:
            return None
        first = logs[0]
        if evidence:
            return dict(evidence(first))
        return {
            _snake(event): True,
            "event_block": first["blockNumber"],
            "event_tx": first["transactionHash"],
        }

    return check


InputT = TypeVar("InputT", bound=BaseModel)
ProgressT = TypeVar("ProgressT", bound=TxProgress)


class ContractCall(Workflow[InputT, ProgressT]):
    """One contract transaction, declared: submitted once, awaited at depth, reconciled.

    Declare on a subclass:

    * ``abi`` (from the user's artifact) and :meth:`contract_address`;
    * ``function`` and :meth:`arguments` (from the input and the progress);
    * ``done_when``: a :func:`view_check` or :func:`event_check` (or override
      :meth:`already_done`);
    * ``done_reasons`` / ``stall_reasons``: revert reasons that mean "done" or "not yet
      possible"; every other revert is FAILED.

    Set ``chain_is_first = False`` when a step of the class comes before the chain (it
    declares ``to=SUBMIT_ONCHAIN``), as the Arweave evidence mixin does.
    """

    __abstract__ = True
    retry_policy = SEED_RETRY
    errors: ClassVar[Mapping[type[BaseException], ErrorRule]] = CHAIN_ERRORS
    abi: ClassVar[Sequence[Mapping[str, Any]]]
    function: ClassVar[str]
    done_when: ClassVar[DoneCheck | None] = None
    done_reasons: ClassVar[frozenset[str]] = frozenset({"already submitted"})
    """Revert reasons that mean the effect is already on chain."""
    stall_reasons: ClassVar[frozenset[str]] = frozenset()
    """Revert reasons that mean "not yet possible": STALLED, retried later."""
    chain_is_first: ClassVar[bool] = True

    eth: EthereumClient
    signers: Mapping[str, Signer]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        if not cls.chain_is_first and "submit_onchain" not in cls.__dict__:
            # The same action, declared as a step that is not the initial one.
            def submit_onchain(self: ContractCall[Any, Any], ctx: StepContext[Any, Any]) -> str:
                return str(ContractCall.submit_onchain(self, ctx))

            marked = step(name=SUBMIT_ONCHAIN, to=(AWAIT_TX_CONFIRM, COMPLETED))(submit_onchain)
            cls.submit_onchain = marked  # type: ignore[method-assign]
        super().__init_subclass__(**kwargs)

    # --- what a subclass declares -----------------------------------------------------

    def contract_address(self, inp: InputT) -> str:
        """The contract's address."""
        raise NotImplementedError(f"{type(self).__name__} must define contract_address()")

    def arguments(self, inp: InputT, progress: ProgressT) -> Sequence[Any]:
        """The arguments of ``function``."""
        raise NotImplementedError(f"{type(self).__name__} must define arguments()")

    def chain_settings(self) -> ChainSettings:
        """Depth, polling and replacement rules (default: :class:`ChainSettings`)."""
        return ChainSettings()

    def signer_address(self, inp: InputT) -> str:
        """Who signs: the input's ``signer_address`` unless overridden."""
        return str(getattr(inp, "signer_address"))  # noqa: B009 - any input model

    def already_done(self, inp: InputT) -> Evidence | None:
        """Evidence that the effect is on chain at depth (``done_when``), or None."""
        if self.done_when is None:
            return None
        confirmations = self.chain_settings().confirmations
        return type(self).done_when(self.eth, self.contract(inp), inp, confirmations)  # type: ignore[misc]

    def reconcile_step(self, ctx: ReconcileContext[Any, Any]) -> Reconciliation:
        """Reconcile a step before the chain (nothing on chain, no transaction): re-run."""
        return ctx.rerun(tx="no transaction recorded: nothing was sent")

    # --- the building block ---------------------------------------------------------

    def contract(self, inp: InputT) -> Contract:
        """The contract, bound to ``eth``."""
        return self.eth.contract(self.contract_address(inp), self.abi)

    def queue(self, inp: InputT) -> TxQueue:
        """The signer's transaction queue (Fail ``unknown_signer`` if we lack the key)."""
        address = self.signer_address(inp)
        signer = self.signers.get(address.lower())
        if signer is None:
            raise Fail(f"this runner has no signer for {address}", code="unknown_signer")
        # A client may keep its own time (the in-memory chain's is per block).
        clock: Callable[[], float] = getattr(self.eth, "clock", time.time)
        return TxQueue(self.eth, signer, self.chain_settings(), clock=clock)

    @step(name=SUBMIT_ONCHAIN, initial=True, to=(AWAIT_TX_CONFIRM, COMPLETED))
    def submit_onchain(self, ctx: StepContext[InputT, ProgressT]) -> str:
        """SUBMIT_ONCHAIN: send the transaction through the signer's queue."""
        queue = self.queue(ctx.input)
        in_flight = bool(tx_records(ctx.progress)) and _in_flight(queue, ctx)
        # Precondition first (idempotent action): on chain already means done.
        if not in_flight and self.already_done(ctx.input) is not None:
            ctx.set(already_on_chain=True)
            return COMPLETED
        contract = self.contract(ctx.input)
        args = tuple(self.arguments(ctx.input, ctx.progress))
        sender = self.signer_address(ctx.input)
        try:
            queue.submit(
                ctx,
                lambda nonce: self.eth.build_call(
                    contract, self.function, *args, sender=sender, nonce=nonce
                ),
            )
        except Reverted as exc:  # seen while estimating gas: nothing was recorded or sent
            return self.reverted(ctx, queue, exc.reason)
        except InsufficientFunds:
            # STALLED (the failure table); the slot goes unless one of ours is in the pool.
            if not _in_flight(queue, ctx):
                queue.release(ctx)
            raise
        return AWAIT_TX_CONFIRM

    @step(name=AWAIT_TX_CONFIRM, to=(SUBMIT_ONCHAIN, COMPLETED))
    def await_tx_confirm(self, ctx: StepContext[InputT, ProgressT]) -> str:
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
            return self.reverted(ctx, queue, verdict.revert_reason)
        # Lost (dropped, or reorged out before it was deep enough), or its nonce was
        # taken: back to SUBMIT_ONCHAIN, which re-checks the contract and resends.
        return SUBMIT_ONCHAIN

    def reverted(
        self, ctx: StepContext[InputT, ProgressT], queue: TxQueue, reason: str | None
    ) -> str:
        """Apply the failure table to a revert reason (nothing of ours is in flight)."""
        if reason in self.done_reasons:
            # On-chain wins, but only once the effect is deep enough.
            if self.already_done(ctx.input) is not None:
                ctx.set(already_on_chain=True)
                return COMPLETED
            raise Snooze(
                self.chain_settings().poll_interval,
                f"reverted {reason!r}; waiting for the effect to reach the confirmation depth",
            )
        code = re.sub(r"[^a-z0-9]+", "_", (reason or "reverted").lower()).strip("_")
        if reason in self.stall_reasons:
            queue.release(ctx)  # a STALLED instance with nothing in flight keeps no slot
            raise Stall(
                f"contract says: {reason}", code=code, retry_in=self.chain_settings().stall_retry
            )
        raise Fail(f"contract reverted: {reason}", code=code)

    @reconcile
    def check_chain(self, ctx: ReconcileContext[InputT, ProgressT]) -> Reconciliation:
        """Where is this instance really? Ask the chain before anything."""
        queue = self.queue(ctx.input)
        records = tx_records(ctx.progress)
        evidence: Evidence = {}
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
                return _move(ctx, AWAIT_TX_CONFIRM, **evidence)
        found = self.already_done(ctx.input)
        if found is not None:  # on-chain wins
            return ctx.complete(progress={"already_on_chain": True}, **found, **evidence)
        if records:  # never mined and nobody did it: submit again
            return _move(ctx, SUBMIT_ONCHAIN, **evidence)
        if ctx.step == AWAIT_TX_CONFIRM:
            return ctx.goto(SUBMIT_ONCHAIN, tx="no transaction recorded")
        if ctx.step == SUBMIT_ONCHAIN:
            return ctx.rerun(tx="no transaction recorded: nothing was sent")
        return self.reconcile_step(ctx)


def _in_flight(queue: TxQueue, ctx: StepContext[Any, Any]) -> bool:
    return queue.fate(ctx.progress).kind in ("confirmed", "reverted", "pending")


def _move(ctx: ReconcileContext[Any, Any], target: str, **evidence: Any) -> Reconciliation:
    if ctx.step == target:
        return ctx.rerun(**evidence)
    return ctx.goto(target, **evidence)
