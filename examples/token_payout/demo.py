"""The token payout demo: a real anvil, a fresh SQLite store, one treasury, six payouts.

Run it::

    python -m examples.token_payout             # ~15 s

It starts anvil (one block a second) on a loopback port, deploys ``PayoutToken`` from
the treasury (anvil's first published dev account), and starts six payouts with
idempotency keys (starting one again returns the same instance). Payout 6 is paid by
hand first, outside the workflows: its workflow finds the ``Paid`` event at depth and
completes without sending anything. A runner with four threads then pays the rest
through the treasury's queue while a sampler watches the node: never more than one of
the treasury's transactions pending. It prints each payout's path, the balances and the
``Paid`` events, and stops anvil by PID. No key is printed, logged or stored.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from eth_utils.address import to_checksum_address

from examples.contracts import payout_token_artifact
from statemachine_wf import Client, Runner, RunnerOptions, Status, open_store
from statemachine_wf.adapters.ethereum import EthereumClient, LocalSigner, deploy, start_anvil
from statemachine_wf.adapters.ethereum.devnode import ANVIL_DEV_PRIVATE_KEYS
from statemachine_wf.adapters.ethereum.types import b32, keccak_hex

from .workflows import PayoutSettings, TokenPayout

UNIT = 10**18
AMOUNTS = (120, 75, 300, 42, 18, 9)  # whole tokens; the last one is paid by hand first


def recipient(n: int) -> str:
    """A fixed recipient address per payout (nobody holds its key: it only receives)."""
    return to_checksum_address("0x" + keccak_hex(f"recipient-{n}")[-40:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.token_payout")
    parser.add_argument("--dir", help="working directory (default: a fresh temporary one)")
    parser.add_argument("--block-time", type=float, default=1.0, help="anvil block time, s")
    parser.add_argument("--confirmations", type=int, default=2, help="depth before final")
    args = parser.parse_args(argv)
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="token-payout-"))
    workdir.mkdir(parents=True, exist_ok=True)
    anvil = start_anvil(block_time=args.block_time)
    print(f"workdir  {workdir}\nanvil    {anvil.url}  pid {anvil.pid}")
    try:
        return _demo(anvil.url, workdir, args.confirmations)
    finally:
        anvil.stop()
        print(f"stopped anvil (pid {anvil.pid})")


def _demo(url: str, workdir: Path, confirmations: int) -> int:
    eth = EthereumClient.from_url(url, timeout=10.0)
    treasury = LocalSigner.from_private_key(ANVIL_DEV_PRIVATE_KEYS[0])
    artifact = payout_token_artifact()
    token = deploy(eth, treasury, artifact.abi, artifact.bytecode, 10**6 * UNIT, timeout=60)
    contract = eth.contract(token, artifact.abi)
    print(f"PayoutToken at {token}, treasury {treasury.address}")
    settings = PayoutSettings(
        token=token, treasury=treasury.address, confirmations=confirmations, poll_interval=0.5
    )
    store = open_store(f"sqlite:///{workdir / 'workflows.db'}")
    store.migrate()
    client = Client(store, [TokenPayout])

    def payout(n: int) -> dict[str, Any]:
        ref = keccak_hex(f"invoice-{n}")  # the business reference, hashed: the payout id
        return {"payout_id": ref, "recipient": recipient(n), "amount": AMOUNTS[n - 1] * UNIT}

    last = len(AMOUNTS)
    by_hand = eth.build_call(
        contract, "payout", b32(payout(last)["payout_id"]), recipient(last),
        payout(last)["amount"], sender=treasury.address,
    )  # fmt: skip
    hand_tx = eth.send_raw(treasury.sign_transaction(by_hand))
    eth.w3.eth.wait_for_transaction_receipt(hand_tx, timeout=60)  # type: ignore[arg-type]
    print(f"payout {last} paid by hand, outside the workflows: {hand_tx[:18]}...")
    ids = [client.start(TokenPayout, payout(n), idempotency_key=f"payout-{n}") for n in
           range(1, last + 1)]  # fmt: skip
    again = client.start(TokenPayout, payout(1), idempotency_key="payout-1")
    print(f"payout-1 started again with the same key -> same instance: {again == ids[0]}")

    in_pool: list[int] = []
    stop = threading.Event()

    def sample() -> None:  # the node's view: the treasury's transactions in its pool
        while not stop.is_set():
            in_pool.append(eth.pending_count(treasury.address))
            stop.wait(0.05)

    runner = Runner(
        store,
        [TokenPayout],
        options=RunnerOptions(concurrency=4, idle_poll=0.3, worker_id="token-payout-demo"),
        dependencies={"eth": eth, "signers": {treasury.address.lower(): treasury},
                      "payouts": settings},
    )  # fmt: skip
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    runner.start()
    try:
        while not all(client.status(i).terminal for i in ids):
            time.sleep(0.2)
    finally:
        runner.stop()
        stop.set()
        sampler.join()

    print("\npayouts (from the log):")
    for n, i in enumerate(ids, start=1):
        record = client.get(i)
        p = record.progress
        path = (
            "found paid on chain (Paid event at depth): nothing sent"
            if p.get("already_on_chain")
            else f"tx {str(p.get('onchain_tx_hash'))[:18]}... block {p.get('onchain_block')}"
        )
        waits = sum(1 for e in client.history(i) if e.event_type == "STEP_WAITING")
        print(f"  payout-{n}  {record.status}  {path}  ({waits} waits)")

    print("\non chain:")
    events = list(contract.events.Paid().get_logs(from_block=0))
    for n in range(1, last + 1):
        pid = b32(payout(n)["payout_id"])
        count = sum(1 for e in events if e.args.payoutId == pid)
        balance = contract.functions.balanceOf(recipient(n)).call() // UNIT
        print(f"  payout-{n}  Paid events {count}  recipient balance {balance} PAY")
    print(f"  treasury nonce {eth.nonce(treasury.address)}")
    print(f"  treasury transactions pending at once, at most: {max(in_pool, default=0)}")
    once = len(events) == last and len({e.args.payoutId for e in events}) == last
    ok = (
        once
        and max(in_pool, default=0) <= 1
        and all(client.status(i) == Status.COMPLETED for i in ids)
    )
    store.close()
    print(f"\neach recipient paid exactly once, one in flight, all COMPLETED: {ok}")
    return 0 if ok else 1
