"""Payouts: reserve funds, send the money, notify — and never send it twice.

Run the demo (SQLite, nothing to set up)::

    python -m examples.payouts

It starts a handful of payouts (one twice with the same idempotency key, one to a closed
account, one whose first bank call times out), runs a worker until everything is done and
prints each instance's transitions and the bank's ledger.

The workflow shows the patterns that make a money-moving step safe:

* the payment reference is derived from the input and **saved before** the bank is
  called (``ctx.save``), so a crash after the call leaves a reference to look up;
* the bank call is idempotent on that reference;
* the reconcile hook asks the bank (the outside truth) what happened to a step that was
  in flight when its runner died, instead of guessing.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from statemachine_wf import (
    COMPLETED,
    Client,
    Fail,
    InputError,
    ReconcileContext,
    Reconciliation,
    Retry,
    RetryPolicy,
    Runner,
    RunnerOptions,
    StepContext,
    Workflow,
    open_store,
    reconcile,
    step,
)
from statemachine_wf.definition.workflow import ErrorMap

from .bank import AccountClosed, Bank, BankUnavailable


class PayoutInput(BaseModel):
    """What a payout needs; frozen: a run never changes its input."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    payout_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    account: str = Field(min_length=1, max_length=64)
    amount_cents: int = Field(gt=0, le=10_000_000)
    currency: Literal["EUR", "USD", "GBP"] = "EUR"


class PayoutProgress(BaseModel):
    """What the run has learned; each field is set once."""

    hold_id: str | None = None
    payment_ref: str | None = None
    confirmation: str | None = None
    notified: bool | None = None


Ctx = StepContext[PayoutInput, PayoutProgress]


class Payout(Workflow[PayoutInput, PayoutProgress]):
    """Reserve -> send -> notify."""

    workflow_type = "payments.payout.v1"
    # Quick retries for the demo; the default policy is 5 tries from 1 s doubling to 60 s.
    retry_policy = RetryPolicy(initial_delay=0.05, max_delay=1.0, jitter=False)
    errors: ClassVar[ErrorMap] = {BankUnavailable: Retry, AccountClosed: Fail}

    # Dependencies: annotations without a value. A runner must be given them
    # (Runner(..., dependencies=...), or `worker --deps examples.payouts:dependencies`)
    # and refuses to start without them.
    bank: Bank
    notifications: list[str]

    @step(initial=True, to="send_payment")
    def reserve_funds(self, ctx: Ctx) -> str:
        hold = self.bank.hold(
            f"hold-{ctx.input.payout_id}", ctx.input.account, ctx.input.amount_cents
        )
        ctx.set(hold_id=hold)
        return "send_payment"

    @step(to="notify")
    def send_payment(self, ctx: Ctx) -> str:
        ref = f"pay-{ctx.input.payout_id}"
        ctx.save(payment_ref=ref)  # written ahead: the bank call below may be in doubt
        confirmation = self.bank.transfer(ref, ctx.input.account, ctx.input.amount_cents)
        ctx.set(confirmation=confirmation)
        return "notify"

    @step(to=COMPLETED)
    def notify(self, ctx: Ctx) -> None:
        self.notifications.append(
            f"paid {ctx.input.amount_cents / 100:.2f} {ctx.input.currency} to "
            f"{ctx.input.account} ({ctx.progress.confirmation})"
        )
        ctx.set(notified=True)

    @reconcile
    def check_bank(self, ctx: ReconcileContext[PayoutInput, PayoutProgress]) -> Reconciliation:
        """After a crash in send_payment: did the bank move the money?"""
        if ctx.step == "send_payment" and ctx.progress.payment_ref:
            confirmation = self.bank.find_transfer(ctx.progress.payment_ref)
            if confirmation is not None:
                return ctx.goto(
                    "notify", progress={"confirmation": confirmation}, bank="transfer found"
                )
            return ctx.rerun(bank="no transfer with that reference")
        return ctx.unchanged()


def dependencies() -> dict[str, object]:
    """What ``statemachine-wf worker --deps examples.payouts:dependencies`` injects.

    The bank's ledger lives in ``SWF_BANK_PATH`` (default ``bank.db``).
    """
    return {"bank": Bank(os.environ.get("SWF_BANK_PATH", "bank.db")), "notifications": []}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the payout demo.")
    parser.add_argument("--db", help="store URL (default: a fresh SQLite file)")
    args = parser.parse_args(argv)

    workdir = tempfile.mkdtemp(prefix="swf-payouts-")
    url = args.db or f"sqlite:///{os.path.join(workdir, 'workflows.db')}"
    store = open_store(url)
    bank = Bank(os.path.join(workdir, "bank.db"), flaky_first_calls=frozenset({"pay-p-1002"}))
    notifications: list[str] = []
    client = Client(store, [Payout])

    print(f"store: {url}\n")
    requests = [
        {"payout_id": "p-1001", "account": "acct-alice", "amount_cents": 12_500},
        {"payout_id": "p-1002", "account": "acct-bob", "amount_cents": 4_200, "currency": "USD"},
        {"payout_id": "p-1003", "account": "closed-carol", "amount_cents": 999},
        {"payout_id": "p-1001", "account": "acct-alice", "amount_cents": 12_500},  # same key
    ]
    ids: list[str] = []
    for req in requests:
        instance_id = client.start(Payout, req, idempotency_key=str(req["payout_id"]))
        again = (
            " (same idempotency key: same instance, nothing new started)"
            if (instance_id in ids)
            else ""
        )
        print(f"start {req['payout_id']} -> {instance_id}{again}")
        if instance_id not in ids:
            ids.append(instance_id)
    try:
        client.start(Payout, {"payout_id": "p-1004", "account": "x", "amount_cents": -5})
    except InputError as exc:  # names each refused field: exc.fields
        field, problem = exc.fields[0]
        print(f"start p-1004 refused, nothing written: {field}: {problem}")

    print("\nrunning a worker until everything is done ...\n")
    Runner(
        store,
        [Payout],
        options=RunnerOptions(concurrency=4),
        dependencies={"bank": bank, "notifications": notifications},
    ).run_until_idle(timeout=60)

    for instance_id in ids:
        record = client.get(instance_id)
        print(f"{record.input['payout_id']}  {record.status}")
        for event in client.history(instance_id):
            where = f" {event.node}#{event.attempt}" if event.node else ""
            detail = ""
            if event.event_type == "STEP_COMPLETED":
                detail = f" -> {event.payload['to']}"
            elif event.error:
                detail = f"  [{event.error['code']}: {event.error['message']}]"
                if event.payload.get("outcome") == "retry":
                    detail += f" retry in {event.payload['retry_in']} s"
            print(f"    {event.event_type}{where}{detail}")
        assert client.verify(instance_id) == {}, "projection differs from the log"

    print("\nbank ledger (each payout moved money at most once):")
    for ref, account, amount in bank.transfers():
        print(f"    {ref:<12} {account:<12} {amount / 100:>10.2f}")
    print("\nnotifications:")
    for line in notifications:
        print(f"    {line}")
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
