"""The ChaosChain demo: real anvil + arlocal, a fresh SQLite store, three kinds of workflow.

Run it::

    python -m examples.chaoschain                         # the whole thing, ~30 s
    python -m examples.chaoschain --kill-after 4          # SIGKILL itself mid-way ...
    python -m examples.chaoschain --resume DIR            # ... and finish from DIR

It starts anvil (one block a second) and arlocal on loopback ports, deploys ChaosChain,
and runs three phases, each started with idempotency keys so that running a phase again
(on resume) starts nothing twice:

1. three WorkSubmissions (two on the same signer: the per-signer queue serialises them);
2. two ScoreSubmissions of the first two pieces of work;
3. one CloseEpoch.

Then it prints every instance's state transitions and what the chain says, and stops
both nodes by PID. ``--kill-after N`` SIGKILLs the process after N step transitions
have committed; the nodes (the "outside world") keep running, and their addresses are
in ``DIR/run.json``. ``--resume DIR`` opens the same store and nodes, lets the runner's
start-up reconciliation sort out what was in flight, finishes, and stops the nodes.

The dev keys are anvil's published test accounts; the Arweave wallet is generated and
kept in ``DIR/arweave-wallet.json`` (mode 0600) for the resume. No key is printed,
logged or stored in the workflow database.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from examples.contracts import chaoschain_artifact
from statemachine_wf import (
    Client,
    InputError,
    Runner,
    RunnerOptions,
    Status,
    Workflow,
    open_store,
)
from statemachine_wf.adapters.arweave import ArweaveClient, ArweaveWallet, start_arlocal
from statemachine_wf.adapters.ethereum import (
    EthereumClient,
    LocalSigner,
    Signer,
    deploy,
    start_anvil,
)
from statemachine_wf.adapters.ethereum.devnode import ANVIL_DEV_PRIVATE_KEYS
from statemachine_wf.adapters.ethereum.txqueue import DEFAULT_CONFIRMATIONS
from statemachine_wf.core.store import Store

from .workflows import ChaosChainSettings, CloseEpoch, ScoreSubmission, WorkSubmission, data_hash_of

WORKFLOWS: tuple[type[Workflow[Any, Any]], ...] = (WorkSubmission, ScoreSubmission, CloseEpoch)
STUDIO = "0x00000000000000000000000000000000000057d1"
EPOCH = 1
SIGNERS = (0, 0, 1)  # dev accounts of the three pieces of work (two share a signer)
SCORER = 2
CLOSER = 3
DEPLOYER = 9
EVIDENCE = (
    "run 1: fine-tuned model, eval accuracy 0.912, weights sha256 9f2c...",
    "run 2: distilled model, eval accuracy 0.887, weights sha256 41ab...",
    "run 3: baseline model, eval accuracy 0.801, weights sha256 c07e...",
)


@dataclass
class World:
    """The nodes and clients of one demo run."""

    workdir: Path
    eth: EthereumClient
    arweave: ArweaveClient
    contract_address: str
    signers: list[Signer]
    settings: ChaosChainSettings
    store: Store
    client: Client


def _signer(index: int) -> LocalSigner:
    return LocalSigner.from_private_key(ANVIL_DEV_PRIVATE_KEYS[index])


def _start_fresh(workdir: Path, block_time: float, confirmations: int) -> dict[str, Any]:
    """Start the nodes, fund and deploy; return (and write) the run's description."""
    anvil = start_anvil(block_time=block_time)
    arlocal = start_arlocal()
    print(f"anvil    {anvil.url}  pid {anvil.pid}  block time {block_time} s")
    print(f"arlocal  {arlocal.url}  pid {arlocal.pid}")
    run = {
        "anvil": {"url": anvil.url, "pid": anvil.pid},
        "arlocal": {"url": arlocal.url, "pid": arlocal.pid, "workdir": str(arlocal.workdir)},
        "confirmations": confirmations,
    }
    (workdir / "run.json").write_text(json.dumps(run, indent=2))  # nodes first: stoppable
    print("generating an Arweave wallet (a few seconds) ...")
    wallet = ArweaveWallet.generate()
    wallet.save(workdir / "arweave-wallet.json")
    arlocal.mint(wallet.address, 10**13)
    eth = EthereumClient.from_url(anvil.url, timeout=10.0)
    artifact = chaoschain_artifact()
    run["contract"] = deploy(eth, _signer(DEPLOYER), artifact.abi, artifact.bytecode, timeout=60)
    (workdir / "run.json").write_text(json.dumps(run, indent=2))
    print(f"ChaosChain deployed at {run['contract']}")
    return run


def _open_world(workdir: Path, run: dict[str, Any]) -> World:
    eth = EthereumClient.from_url(run["anvil"]["url"], timeout=10.0)
    wallet = ArweaveWallet.from_file(workdir / "arweave-wallet.json")
    arweave = ArweaveClient(run["arlocal"]["url"], wallet, timeout=30.0)
    settings = ChaosChainSettings(
        contract_address=run["contract"],
        confirmations=int(run["confirmations"]),
        poll_interval=0.5,
        stuck_after=30.0,
        not_found_after=10.0,
        stall_retry=2.0,
    )
    store = open_store(f"sqlite:///{workdir / 'workflows.db'}")
    store.migrate()
    signers: list[Signer] = [_signer(i) for i in sorted({*SIGNERS, SCORER, CLOSER})]
    return World(
        workdir=workdir,
        eth=eth,
        arweave=arweave,
        contract_address=run["contract"],
        signers=signers,
        settings=settings,
        store=store,
        client=Client(store, list(WORKFLOWS)),
    )


def _stop_by_pid(run: dict[str, Any]) -> None:
    """Stop the nodes of a run by PID (they may have outlived the process that started them)."""
    for name in ("anvil", "arlocal"):
        pid = int(run[name]["pid"])
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                os.kill(pid, 0)  # raises ProcessLookupError once it is gone
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
                time.sleep(0.05)
            os.kill(pid, signal.SIGKILL)
        print(f"stopped {name} (pid {pid})")
    shutil.rmtree(run["arlocal"]["workdir"], ignore_errors=True)


def _phases(world: World) -> Iterator[tuple[str, list[str]]]:
    """Start each phase's instances (idempotently) and yield their ids."""
    client = world.client
    works: list[str] = []
    hashes = [data_hash_of(text) for text in EVIDENCE]
    for n, (text, who) in enumerate(zip(EVIDENCE, SIGNERS, strict=True), start=1):
        inp = {
            "studio_address": STUDIO,
            "epoch": EPOCH,
            "signer_address": _signer(who).address,
            "data_hash": hashes[n - 1],
            "evidence": text,
        }
        works.append(client.start(WorkSubmission, inp, idempotency_key=f"work-{n}"))
    again = client.start(WorkSubmission, _work_input(0, hashes), idempotency_key="work-1")
    print(f"  work-1 started again with the same key -> same instance: {again == works[0]}")
    try:
        client.start(WorkSubmission, {**_work_input(0, hashes), "data_hash": "0x1234"})
    except InputError as exc:  # names each refused field: exc.fields
        field, problem = exc.fields[0]
        print(f"  malformed input refused, nothing written: {field}: {problem}")
    yield "3 WorkSubmissions (evidence to Arweave, then submitWork)", works
    scores = [
        client.start(
            ScoreSubmission,
            {
                "studio_address": STUDIO,
                "epoch": EPOCH,
                "signer_address": _signer(SCORER).address,
                "data_hash": hashes[n],
                "score": score,
            },
            idempotency_key=f"score-{n + 1}",
        )
        for n, score in ((0, 87), (1, 64))
    ]
    yield "2 ScoreSubmissions", scores
    close = client.start(
        CloseEpoch,
        {"studio_address": STUDIO, "epoch": EPOCH, "signer_address": _signer(CLOSER).address},
        idempotency_key=f"close-{EPOCH}",
    )
    yield "1 CloseEpoch", [close]


def _work_input(n: int, hashes: Sequence[str]) -> dict[str, Any]:
    return {
        "studio_address": STUDIO,
        "epoch": EPOCH,
        "signer_address": _signer(SIGNERS[n]).address,
        "data_hash": hashes[n],
        "evidence": EVIDENCE[n],
    }


def _killer(store: Store, after: int) -> None:
    """SIGKILL this process once ``after`` step transitions have committed."""

    def watch() -> None:
        while True:
            done = sum(
                1
                for record in store.list_instances(limit=1000)
                for event in store.events(record.id)
                if event.event_type == "STEP_COMPLETED"
            )
            if done >= after:
                print(f"\n*** {done} step transitions committed: SIGKILL ***", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(0.02)

    threading.Thread(target=watch, name="killer", daemon=True).start()


def _run(world: World) -> list[str]:
    ids: list[str] = []
    for title, phase_ids in _phases(world):
        print(f"\nphase: {title}")
        ids.extend(phase_ids)
        runner = Runner(
            world.store,
            list(WORKFLOWS),
            options=RunnerOptions(concurrency=6, idle_poll=0.5, worker_id="chaoschain-demo"),
            dependencies={
                "eth": world.eth,
                "arweave": world.arweave,
                "signers": {s.address.lower(): s for s in world.signers},
                "chaoschain": world.settings,
            },
        )
        runner.start()
        try:
            while not all(world.client.status(i).terminal for i in phase_ids):
                time.sleep(0.1)
        finally:
            runner.stop()
        for i in phase_ids:
            print(f"  {_label(world, i)}: {world.client.status(i)}")
    return ids


def _label(world: World, instance_id: str) -> str:
    record = world.client.get(instance_id)
    name = record.type.split(".")[1]
    return f"{name} {record.idempotency_key or instance_id[:8]}"


def _print_transitions(world: World, ids: list[str]) -> None:
    print("\nstate transitions (from the log):")
    for i in ids:
        record = world.client.get(i)
        print(f"  {_label(world, i)}  [{record.status}]")
        waiting: dict[str, int] = {}
        for e in world.client.history(i):
            if e.event_type == "STEP_WAITING":
                key = "waiting for the signer's slot" if e.payload.get("lock") else "tx pending"
                waiting[key] = waiting.get(key, 0) + 1
                continue
            line = _describe(e.event_type, e.node, e.payload, e.error)
            if not line:
                continue
            for what, count in waiting.items():
                print(f"      {e.node or '':<17} ... {what} (x{count})")
            waiting = {}
            print(f"      {line}")


def _describe(kind: str, node: str | None, payload: dict[str, Any], error: Any) -> str:
    progress = payload.get("progress", {})
    if kind == "STEP_COMPLETED":
        note = ""
        tx = progress.get("onchain_tx_hash")
        if tx:
            note = f"  tx {tx[:18]}... block {progress.get('onchain_block')}"
        if progress.get("already_on_chain"):
            note = "  (already on chain)"
        return f"{node:<17} -> {payload['to']}{note}"
    if kind == "PROGRESS_SET":
        if "arweave_tx_id" in progress:
            return f"{node:<17}    saved arweave id {progress['arweave_tx_id']} before posting"
        for slot, rec in progress.items():
            if slot.startswith("tx_") and isinstance(rec, dict):
                return (
                    f"{node:<17}    saved {slot}: tx {rec['tx_hash'][:18]}... "
                    f"nonce {rec['nonce']} before broadcasting"
                )
        return ""
    if kind == "RECONCILED":
        evidence = {k: v for k, v in payload.get("evidence", {}).items() if k != "hashes_checked"}
        target = payload.get("to", "COMPLETED" if payload["decision"] == "complete" else node)
        return f"{node:<17} reconciled: {payload['decision']} -> {target}  {evidence}"
    if kind == "STEP_FAILED":
        return f"{node:<17} failed ({payload['outcome']}): {error.get('message', '')[:80]}"
    if kind in ("WORKFLOW_COMPLETED", "WORKFLOW_CREATED"):
        return kind
    return ""


def _print_chain(world: World, ids: list[str]) -> None:
    contract = world.eth.contract(world.contract_address, chaoschain_artifact().abi)
    print("\non chain:")
    events = contract.events.WorkSubmitted().get_logs(from_block=0)
    for event in events:
        print(
            f"  WorkSubmitted  data {event.args.dataHash.hex()[:12]}...  by "
            f"{event.args.submitter}  evidence {event.args.evidenceId}"
        )
    for event in contract.events.ScoreSubmitted().get_logs(from_block=0):
        print(
            f"  ScoreSubmitted data {event.args.dataHash.hex()[:12]}...  score {event.args.score}"
        )
    studio = world.eth.w3.to_checksum_address(STUDIO)
    closed = contract.functions.epochClosed(studio, EPOCH).call()
    print(f"  epoch {EPOCH} closed: {closed}")
    for signer in world.signers:
        print(f"  nonce of {signer.address}: {world.eth.nonce(signer.address)}")
    per_hash = [e.args.dataHash for e in events]
    print(f"  one submitWork per data hash: {len(per_hash) == len(set(per_hash))}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.chaoschain", description="Run the ChaosChain demo."
    )
    parser.add_argument("--dir", help="working directory (default: a fresh temporary one)")
    parser.add_argument("--block-time", type=float, default=1.0, help="anvil block time, s")
    parser.add_argument(
        "--confirmations", type=int, default=DEFAULT_CONFIRMATIONS, help="depth before confirmed"
    )
    parser.add_argument(
        "--kill-after", type=int, metavar="N", help="SIGKILL after N step transitions"
    )
    parser.add_argument("--resume", metavar="DIR", help="finish the killed run kept in DIR")
    args = parser.parse_args(argv)

    if args.resume:
        workdir = Path(args.resume)
        run = json.loads((workdir / "run.json").read_text())
        print(f"resuming the run in {workdir} (nodes still up: {run['anvil']['url']}, "
              f"{run['arlocal']['url']})")  # fmt: skip
    else:
        workdir = Path(args.dir or tempfile.mkdtemp(prefix="chaoschain-"))
        workdir.mkdir(parents=True, exist_ok=True)
        print(f"workdir  {workdir}")
        run = {}
    try:
        if not args.resume:
            run = _start_fresh(workdir, args.block_time, args.confirmations)
        world = _open_world(workdir, run)
        if args.kill_after:
            print(
                f"\nwill SIGKILL itself after {args.kill_after} step transitions; then run\n"
                f"    python -m examples.chaoschain --resume {workdir}\n"
            )
            _killer(world.store, args.kill_after)
        ids = _run(world)
        _print_transitions(world, ids)
        _print_chain(world, ids)
        ok = all(world.client.status(i) == Status.COMPLETED for i in ids)
        world.arweave.close()
        world.store.close()
        print(f"\nall workflows COMPLETED: {ok}")
        return 0 if ok else 1
    except KeyboardInterrupt:
        return 130
    finally:
        if run:
            _stop_by_pid(run)


if __name__ == "__main__":
    sys.exit(main())
