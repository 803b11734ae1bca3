"""A runner process whose workflow pays once per instance and has a flaky reconcile hook.

    python hook_worker.py --url URL [--schema S] --ledger SPEC --worker-id ID
        [--lease 1.0] [--concurrency 1] [--chaos after_effect:k]

``Paying.pay`` makes a payment that is *not* idempotent (a row in the ledger's ``runs``,
step ``pay``) and, with ``--chaos after_effect:1``, dies right after it, before its
completion is recorded. The reconcile hook records each call (step ``hook``); its first
call fails (``input.fail_with``: ``"error"`` raises, ``"stall"`` raises ``Stall``), later
calls look the payment up and complete the instance when it was made.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from statemachine_wf.definition.retry import RetryPolicy
from statemachine_wf.definition.workflow import COMPLETED, Workflow, reconcile, step
from statemachine_wf.errors import Stall
from statemachine_wf.runtime.context import ReconcileContext, Reconciliation, StepContext
from statemachine_wf.runtime.runner import Runner, RunnerOptions
from tests.integration.crash.workflows import Chaos, Ledger, open_ledger


class PayInput(BaseModel):
    fail_with: str = "error"


class PayProgress(BaseModel):
    pass


class Paying(Workflow[PayInput, PayProgress]):
    workflow_type = "crashtest.paying.v1"
    retry_policy = RetryPolicy(initial_delay=0.05, max_delay=0.2, jitter=False)
    ledger: Ledger
    chaos: Chaos

    @step(initial=True, to=COMPLETED)
    def pay(self, ctx: StepContext[PayInput, PayProgress]) -> None:
        self.ledger.record_run(ctx.instance_id, "pay", ctx.attempt)  # the payment
        self.chaos.reach("after_effect")

    @reconcile
    def check(self, ctx: ReconcileContext[PayInput, PayProgress]) -> Reconciliation:
        self.ledger.record_run(ctx.instance_id, "hook", ctx.attempt)
        runs = self.ledger.runs()
        if runs[(ctx.instance_id, "hook")] == 1:
            if ctx.input.fail_with == "stall":
                raise Stall("bank unreachable", retry_in=0.05)
            raise RuntimeError("bank unreachable")
        if runs[(ctx.instance_id, "pay")] > 0:
            return ctx.complete(paid=True)
        return ctx.rerun(paid=False)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--schema")
    p.add_argument("--ledger", required=True)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--lease", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--chaos")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from statemachine_wf.stores import open_store

    options = {} if args.schema is None else {"schema": args.schema}
    store = open_store(args.url, **options)
    store.migrate()
    ledger = open_ledger(args.ledger)
    runner = Runner(
        store,
        [Paying],
        options=RunnerOptions(
            concurrency=args.concurrency, lease=args.lease, worker_id=args.worker_id, idle_poll=0.2
        ),
        dependencies={"ledger": ledger, "chaos": Chaos(args.chaos)},
    )
    print(f"READY {args.worker_id}", flush=True)
    try:
        runner.run()  # until SIGTERM
    finally:
        ledger.close()
        store.close()


if __name__ == "__main__":
    main()
