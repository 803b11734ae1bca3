"""A ChaosChain runner process for the chain tests, with SIGKILL at chosen boundaries.

    python worker_main.py --url URL [--schema S] --rpc URL --gateway URL --contract ADDR
        --wallet JWK_FILE --worker-id ID [--chaos POINT] [--confirmations N]

The signer's key comes from ``SWF_ETH_PRIVATE_KEY`` (never the command line). ``--chaos``
kills this process with SIGKILL the first time the run reaches one WorkSubmission
boundary, by wrapping the real clients (no test hook in the product code):

* ``upload_before_post``  arweave id and record saved, nothing posted;
* ``upload_after_post``   posted, UPLOAD_EVIDENCE not completed;
* ``before_record``       transaction signed, not recorded;
* ``after_record``        raw transaction and hash recorded, not broadcast;
* ``after_broadcast``     broadcast, no receipt seen;
* ``after_receipt``       a final receipt seen, completion not committed.

Prints ``READY <worker id>`` once the store is open, then serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from statemachine_wf import Runner, RunnerOptions
from statemachine_wf.adapters.arweave import ArweaveClient, ArweaveWallet, PreparedTx, UploadResult
from statemachine_wf.adapters.ethereum import (
    ConfirmationRule,
    EthereumClient,
    LocalSigner,
    SignedTx,
    TxStatus,
)
from statemachine_wf.stores import open_store
from tests.integration.chain.flows import FLOWS, deps, settings

POINTS = (
    "upload_before_post",
    "upload_after_post",
    "before_record",
    "after_record",
    "after_broadcast",
    "after_receipt",
)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class ChaosEth(EthereumClient):
    def __init__(self, base: EthereumClient, point: str | None) -> None:
        super().__init__(base.w3)
        self.point = point

    def send_raw(self, raw: SignedTx | bytes | str) -> str:
        if self.point == "after_record":
            die()
        tx_hash = super().send_raw(raw)
        if self.point == "after_broadcast":
            die()
        return tx_hash

    def receipt_status(self, tx_hash: str, *, confirmations: ConfirmationRule = 1) -> TxStatus:
        status = super().receipt_status(tx_hash, confirmations=confirmations)
        if self.point == "after_receipt" and status.final:
            die()
        return status


class ChaosSigner:
    def __init__(self, inner: LocalSigner, point: str | None) -> None:
        self.inner = inner
        self.point = point

    @property
    def address(self) -> Any:
        return self.inner.address

    def sign_transaction(self, tx: Mapping[str, Any]) -> SignedTx:
        signed = self.inner.sign_transaction(tx)
        if self.point == "before_record":
            die()
        return signed


class ChaosArweave(ArweaveClient):
    point: str | None = None

    def post(self, prepared: PreparedTx) -> UploadResult:
        if self.point == "upload_before_post":
            die()
        result = super().post(prepared)
        if self.point == "upload_after_post":
            die()
        return result


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--schema")
    p.add_argument("--rpc", required=True)
    p.add_argument("--gateway", required=True)
    p.add_argument("--contract", required=True)
    p.add_argument("--wallet", required=True)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--lease", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--confirmations", type=int, default=1)
    p.add_argument("--chaos", choices=POINTS)
    args = p.parse_args()
    logging.basicConfig(
        level=logging.WARNING, format=f"%(asctime)s {args.worker_id} %(name)s %(message)s"
    )
    options: dict[str, Any] = {} if args.schema is None else {"schema": args.schema}
    store = open_store(args.url, **options)
    store.migrate()
    eth = ChaosEth(EthereumClient.from_url(args.rpc, timeout=5.0), args.chaos)
    signer = ChaosSigner(LocalSigner.from_env("SWF_ETH_PRIVATE_KEY"), args.chaos)
    arweave = ChaosArweave(args.gateway, ArweaveWallet.from_file(args.wallet), timeout=10.0)
    arweave.point = args.chaos
    runner = Runner(
        store,
        FLOWS,
        options=RunnerOptions(
            concurrency=args.concurrency, lease=args.lease, worker_id=args.worker_id, idle_poll=0.2
        ),
        dependencies=deps(
            eth,
            arweave,
            [signer],
            settings(args.contract, confirmations=args.confirmations),
        ),
    )
    print(f"READY {args.worker_id}", flush=True)
    try:
        runner.run()  # until SIGTERM
    finally:
        arweave.close()
        store.close()


if __name__ == "__main__":
    main()
