"""Two workflows to attack, with in-memory fakes of the outside world they act on.

``Order`` is linear (charge -> ship -> notify) with set-once progress and a ``ctx.save``
ahead of the charge. ``Transfer`` signs, broadcasts and confirms a transaction on a fake
chain: ``confirm`` branches (mined -> COMPLETED, reverted -> refund) and loops back to
``broadcast`` when the transaction is dropped; its reconcile hook asks the chain.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from statemachine_wf.definition.workflow import COMPLETED, Workflow, reconcile, step
from statemachine_wf.errors import Retry
from statemachine_wf.runtime.context import ReconcileContext, Reconciliation, StepContext


# -- Order --------------------------------------------------------------------------------
class OrderInput(BaseModel):
    model_config = ConfigDict(frozen=True)

    order_id: str = Field(min_length=1, max_length=8, pattern=r"^[a-z0-9]+$")
    amount: int = Field(ge=1, le=10_000)


class OrderProgress(BaseModel):
    charge_id: str | None = None
    shipment: str | None = None
    notified: bool | None = None


class Bank:
    """Charges are captured by id: capturing the same id twice takes the money once."""

    def __init__(self) -> None:
        self.intents: dict[str, int] = {}
        self.captured: dict[str, int] = {}

    def open_intent(self, order_id: str, amount: int) -> str:
        charge_id = f"ch_{order_id}_{amount}"
        self.intents[charge_id] = amount
        return charge_id

    def capture(self, charge_id: str) -> None:
        self.captured.setdefault(charge_id, self.intents[charge_id])


class Warehouse:
    def __init__(self) -> None:
        self.shipments: dict[str, str] = {}

    def ship(self, order_id: str) -> str:
        return self.shipments.setdefault(order_id, f"sh_{order_id}")


OrderCtx = StepContext[OrderInput, OrderProgress]


class Order(Workflow[OrderInput, OrderProgress]):
    """Charge the card, ship the parcel, tell the customer."""

    workflow_type = "shop.order.v1"
    bank: Bank
    warehouse: Warehouse

    @step(initial=True, to="ship")
    def charge(self, ctx: OrderCtx) -> None:
        charge_id = ctx.progress.charge_id
        if charge_id is None:
            charge_id = self.bank.open_intent(ctx.input.order_id, ctx.input.amount)
            ctx.save(charge_id=charge_id)  # the identity is durable before the money moves
        self.bank.capture(charge_id)

    @step(to="notify")
    def ship(self, ctx: OrderCtx) -> str:
        ctx.set(shipment=self.warehouse.ship(ctx.input.order_id))
        return "notify"

    @step(to=COMPLETED)
    async def notify(self, ctx: OrderCtx) -> None:
        ctx.set(notified=True)


def order_world() -> dict[str, Any]:
    return {"bank": Bank(), "warehouse": Warehouse()}


def charged_once(world: Any, record: Any) -> None:
    bank: Bank = world["bank"]
    assert len(bank.captured) <= 1, f"charged more than once: {bank.captured}"
    if record.status == "COMPLETED":
        assert list(bank.captured) == [record.progress["charge_id"]]


# -- Transfer -----------------------------------------------------------------------------
class TransferInput(BaseModel):
    model_config = ConfigDict(frozen=True)

    sender: str = Field(min_length=1, max_length=6, pattern=r"^[a-z]+$")
    amount: int = Field(ge=1, le=1_000)
    drops: int = Field(ge=0, le=2, description="the test chain drops the first N broadcasts")
    revert: bool = False


class TransferProgress(BaseModel):
    tx_hash: str | None = None
    block: int | None = None
    refunded: bool | None = None


class Chain:
    """A tiny chain: a mempool that drops the first N broadcasts, blocks, refunds."""

    def __init__(self) -> None:
        self.mempool: set[str] = set()
        self.sends: dict[str, int] = {}
        self.polls: dict[str, int] = {}
        self.mined: dict[str, tuple[int, bool]] = {}
        self.refunds: dict[str, int] = {}

    def send(self, tx: str) -> None:
        if tx in self.mempool or tx in self.mined:
            return  # "already known"
        self.mempool.add(tx)
        self.sends[tx] = self.sends.get(tx, 0) + 1

    def known(self, tx: str) -> bool:
        return tx in self.mempool or tx in self.mined

    def status(self, tx: str, *, drops: int, revert: bool) -> str:
        if tx in self.mined:
            return "reverted" if self.mined[tx][1] else "mined"
        if tx not in self.mempool:
            return "dropped"
        if self.sends[tx] <= drops:
            self.mempool.discard(tx)
            return "dropped"
        self.polls[tx] = self.polls.get(tx, 0) + 1
        if self.polls[tx] < 2:
            return "pending"
        self.mempool.discard(tx)
        self.mined[tx] = (100 + len(self.mined), revert)
        return self.status(tx, drops=drops, revert=revert)

    def refund(self, tx: str, amount: int) -> None:
        self.refunds.setdefault(tx, amount)


TransferCtx = StepContext[TransferInput, TransferProgress]


class Transfer(Workflow[TransferInput, TransferProgress]):
    """Sign, broadcast, confirm; rebroadcast a dropped transaction, refund a reverted one."""

    workflow_type = "chain.transfer.v1"
    chain: Chain

    @step(initial=True, to="broadcast")
    def sign(self, ctx: TransferCtx) -> None:
        raw = f"{ctx.input.sender}:{ctx.input.amount}".encode()
        ctx.set(tx_hash="0x" + hashlib.sha256(raw).hexdigest()[:16])

    @step(to="confirm")
    def broadcast(self, ctx: TransferCtx) -> None:
        assert ctx.progress.tx_hash is not None
        self.chain.send(ctx.progress.tx_hash)

    @step(to=[COMPLETED, "broadcast", "refund"])
    def confirm(self, ctx: TransferCtx) -> str:
        tx = ctx.progress.tx_hash
        assert tx is not None
        status = self.chain.status(tx, drops=ctx.input.drops, revert=ctx.input.revert)
        if status == "pending":
            raise Retry("not mined yet")
        if status == "dropped":
            return "broadcast"
        if status == "reverted":
            return "refund"
        ctx.set(block=self.chain.mined[tx][0])
        return COMPLETED

    @step(to=COMPLETED)
    def refund(self, ctx: TransferCtx) -> None:
        assert ctx.progress.tx_hash is not None
        self.chain.refund(ctx.progress.tx_hash, ctx.input.amount)
        ctx.set(refunded=True)

    @reconcile
    def check_chain(self, ctx: ReconcileContext[TransferInput, TransferProgress]) -> Reconciliation:
        tx = ctx.progress.tx_hash
        if ctx.step == "broadcast" and ctx.in_doubt and tx is not None and self.chain.known(tx):
            return ctx.goto("confirm", seen=True)
        if ctx.step == "refund" and tx is not None and tx in self.chain.refunds:
            return ctx.complete(progress={"refunded": True}, refund=self.chain.refunds[tx])
        return ctx.unchanged()


def transfer_world() -> dict[str, Any]:
    return {"chain": Chain()}


def refunded_only_if_reverted(world: Any, record: Any) -> None:
    chain: Chain = world["chain"]
    for tx in chain.refunds:
        assert chain.mined[tx][1], f"refunded {tx}, which did not revert"
    if record.status == "COMPLETED":
        for tx, (_, reverted) in chain.mined.items():
            assert not reverted or tx in chain.refunds, f"completed without refunding {tx}"
