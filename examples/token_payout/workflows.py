"""Token payouts: one treasury signer pays many recipients, each payout exactly once.

Written from the README's "Your own contract" alone: one declared contract call on the
library's :class:`~statemachine_wf.adapters.ethereum.steps.ContractCall`::

    SUBMIT_ONCHAIN -> AWAIT_TX_CONFIRM -> COMPLETED

The contract is :file:`examples/contracts/PayoutToken.sol` (a small ERC-20 compiled with
the pinned solc by ``npm run build:contracts``): ``payout(payoutId, to, amount)`` moves
tokens from the treasury once per ``payoutId`` and emits ``Paid(payoutId, to, amount)``.

"Already done?" is that event, read at the confirmation depth (:func:`event_check`): a
payout found paid completes without a transaction, whoever paid it. The revert
``"already paid"`` means done too; ``"treasury empty"`` means "not yet" (STALLED, retried
after ``stall_retry``, the treasury's slot given back); any other revert is FAILED with
the reason as its code. Every payout goes through the treasury's queue: one transaction
of the treasury in flight at a time, its hash saved before it is broadcast, every hash
checked by the reconcile hook after a crash. No ``@reconcile`` and no queue code here.

Dependencies (``Runner(..., dependencies=...)``): ``eth`` (EthereumClient), ``signers``
(address, lowercase -> Signer; the treasury's must be there) and ``payouts``
(:class:`PayoutSettings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from examples.contracts import payout_token_artifact
from statemachine_wf.adapters.ethereum.steps import (
    ChainSettings,
    ContractCall,
    TxProgress,
    event_check,
)
from statemachine_wf.adapters.ethereum.types import Address, Bytes32, b32

__all__ = ["PayoutInput", "PayoutSettings", "TokenPayout"]


@dataclass(frozen=True, kw_only=True)
class PayoutSettings(ChainSettings):
    """The token contract and the treasury that pays (plus :class:`ChainSettings`)."""

    token: str
    treasury: str


class PayoutInput(BaseModel):
    """Pay ``amount`` (token base units) to ``recipient`` under ``payout_id``, once."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    payout_id: Bytes32
    recipient: Address
    amount: int = Field(gt=0, lt=2**256)


class TokenPayout(ContractCall[PayoutInput, TxProgress]):
    """``payout(payoutId, to, amount)`` from the treasury, once per payout id."""

    workflow_type = "token.payout.v1"
    abi = payout_token_artifact().abi
    function = "payout"
    done_when = event_check(
        "Paid",
        lambda inp: {"payoutId": b32(inp.payout_id)},
        evidence=lambda log: {"paid_to": log["to"], "paid_amount": log["amount"]},
    )
    done_reasons = frozenset({"already paid"})
    stall_reasons = frozenset({"treasury empty"})

    payouts: PayoutSettings

    def chain_settings(self) -> PayoutSettings:
        return self.payouts

    def contract_address(self, inp: PayoutInput) -> str:
        return self.payouts.token

    def signer_address(self, inp: PayoutInput) -> str:
        return self.payouts.treasury

    def arguments(self, inp: PayoutInput, progress: TxProgress) -> tuple[Any, ...]:
        return b32(inp.payout_id), inp.recipient, inp.amount
