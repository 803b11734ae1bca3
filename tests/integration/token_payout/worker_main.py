"""A TokenPayout runner process, with SIGKILL at one chosen boundary.

    python worker_main.py --url URL [--schema NAME] --rpc URL --token ADDR --worker-id ID
        [--chaos POINT] [--confirmations N] [--concurrency N]

The treasury's key comes from ``SWF_ETH_PRIVATE_KEY`` (never the command line).
``--chaos`` kills this process with SIGKILL the first time the run reaches the boundary,
by wrapping the real store, client and signer (no test hook in the product code):

* ``before_save``            transaction signed, its record not saved;
* ``after_save``             the record's commit (``tx_N``) done, nothing broadcast;
* ``before_broadcast``       about to hand the recorded bytes to the node;
* ``after_broadcast``        the node has them, no receipt looked at;
* ``before_confirm_commit``  AWAIT_TX_CONFIRM returned COMPLETED, not committed;
* ``after_confirm_commit``   that completion committed (and the next payout's submit,
                             woken by the slot's release, started: nothing recorded).

Prints ``READY <worker id>`` once the store is open, then serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from examples.token_payout import TokenPayout
from statemachine_wf import Runner, RunnerOptions
from statemachine_wf.adapters.ethereum import EthereumClient, LocalSigner, SignedTx
from statemachine_wf.core.store import Claim, Commit
from statemachine_wf.definition.events import Ev
from statemachine_wf.stores._decisions import SqlStore
from statemachine_wf.stores.postgres import PostgresStore
from statemachine_wf.stores.sqlite import SQLiteStore
from tests.integration.token_payout.conftest import settings_for

POINTS = (
    "before_save",
    "after_save",
    "before_broadcast",
    "after_broadcast",
    "before_confirm_commit",
    "after_confirm_commit",
)

T = TypeVar("T")


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


# after_confirm_commit: the next payout's submit, started (woken by the slot's release) and
# parked where it asks for its nonce - nothing recorded or sent - when the runner dies, so
# the restarted runner has a step in doubt to reconcile whatever the threads' timing.
NEXT_SUBMIT_ARMED = threading.Event()
NEXT_SUBMIT_REACHED = threading.Event()


class Chaos(SqlStore):
    """The store's ``apply``, with SIGKILL around the commits that matter."""

    point: str | None = None

    def apply(self, commit: Commit) -> int:
        return self._around(commit, lambda: super(Chaos, self).apply(commit))

    def apply_and_claim(self, commit: Commit, **kwargs: Any) -> tuple[int, list[Claim]]:
        return self._around(commit, lambda: super(Chaos, self).apply_and_claim(commit, **kwargs))

    def _around(self, commit: Commit, write: Callable[[], T]) -> T:
        events = commit.decision.events
        saves_tx = any(
            e.event_type == Ev.PROGRESS_SET
            and any(k.startswith("tx_") for k in e.payload.get("progress", {}))
            for e in events
        )
        confirms = any(
            e.event_type == Ev.STEP_COMPLETED and e.node == "AWAIT_TX_CONFIRM" for e in events
        )
        if confirms and self.point == "before_confirm_commit":
            die()
        if confirms and self.point == "after_confirm_commit":
            NEXT_SUBMIT_ARMED.set()  # the slot is already released: the next may start
        done = write()
        if saves_tx and self.point == "after_save":
            die()
        if confirms and self.point == "after_confirm_commit":
            NEXT_SUBMIT_REACHED.wait(30)
            die()
        return done


class ChaosSQLite(Chaos, SQLiteStore):
    pass


class ChaosPostgres(Chaos, PostgresStore):
    pass


class ChaosEth(EthereumClient):
    def __init__(self, base: EthereumClient, point: str | None) -> None:
        super().__init__(base.w3)
        self.point = point

    def nonce(self, address: str, block: Literal["latest", "pending"] = "latest") -> int:
        if block == "pending" and NEXT_SUBMIT_ARMED.is_set():
            NEXT_SUBMIT_REACHED.set()
            threading.Event().wait()  # until the SIGKILL
        return super().nonce(address, block)

    def send_raw(self, raw: SignedTx | bytes | str) -> str:
        if self.point == "before_broadcast":
            die()
        tx_hash = super().send_raw(raw)
        if self.point == "after_broadcast":
            die()
        return tx_hash


class ChaosSigner:
    def __init__(self, inner: LocalSigner, point: str | None) -> None:
        self.inner = inner
        self.point = point

    @property
    def address(self) -> Any:
        return self.inner.address

    def sign_transaction(self, tx: Mapping[str, Any]) -> SignedTx:
        signed = self.inner.sign_transaction(tx)
        if self.point == "before_save":
            die()
        return signed


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--schema", default=None, help="the PostgreSQL schema of the tables")
    p.add_argument("--rpc", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--lease", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--confirmations", type=int, default=1)
    p.add_argument("--chaos", choices=POINTS)
    args = p.parse_args()
    logging.basicConfig(
        level=logging.WARNING, format=f"%(asctime)s {args.worker_id} %(name)s %(message)s"
    )
    store: Chaos
    if args.url.startswith("sqlite:///"):
        store = ChaosSQLite(args.url.removeprefix("sqlite:///"))
    else:
        store = ChaosPostgres(args.url, schema=args.schema or "public")
    store.point = args.chaos
    store.migrate()
    eth = ChaosEth(EthereumClient.from_url(args.rpc, timeout=5.0), args.chaos)
    signer = ChaosSigner(LocalSigner.from_env("SWF_ETH_PRIVATE_KEY"), args.chaos)
    settings = settings_for(args.token, signer.address, confirmations=args.confirmations)
    runner = Runner(
        store,
        [TokenPayout],
        options=RunnerOptions(
            concurrency=args.concurrency, lease=args.lease, worker_id=args.worker_id, idle_poll=0.2
        ),
        dependencies={
            "eth": eth,
            "signers": {signer.address.lower(): signer},
            "payouts": settings,
        },
    )
    print(f"READY {args.worker_id}", flush=True)
    try:
        runner.run()  # until SIGTERM
    finally:
        store.close()


if __name__ == "__main__":
    main()
