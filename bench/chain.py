"""The chain benchmark: WorkSubmissions through the per-signer queue on anvil + arlocal.

``python -m bench chain [--quick]`` measures, in one run:

1. **Throughput per signer**: N WorkSubmissions per signer (UPLOAD_EVIDENCE ->
   SUBMIT_ONCHAIN -> AWAIT_TX_CONFIRM -> COMPLETED, the real example workflow and its
   seed retry policy) for 1, 4 and 16 signers, on anvil with automine (a block per
   transaction) and with ``--block-time 1``. All instances are created first; one
   in-process ``Runner`` on a fresh SQLite store is timed from ``start()`` to the last
   COMPLETED. Only one transaction per signer is ever in flight (the queue's durable
   slot is held from submit to confirmation), so at block time B with C confirmations a
   signer cannot do better than one transaction per C*B seconds.
2. **Submit -> confirmed latency**, from the log: the ``PROGRESS_SET`` event that
   records ``tx_1`` (write-ahead, committed immediately before the broadcast) to the
   ``STEP_COMPLETED`` of ``AWAIT_TX_CONFIRM``. Start -> COMPLETED is shown next to it
   (it includes the upload and the wait for the signer's slot).
3. **Start-up reconciliation of in-flight workflows**: R WorkSubmissions, one signer
   each (anvil started with R+1 funded dev accounts), are run with mining off until
   every one is RUNNING in AWAIT_TX_CONFIRM with its transaction recorded and in the
   node's pool; that runner is stopped, the pool is mined, and a fresh runner's
   start-up pass is timed until all R are COMPLETED. Its JSON-RPC calls are counted
   by a counting HTTP provider.

anvil's dev accounts come from its public test mnemonic (``--accounts K --config-out``
gives their keys); no key is printed or stored. Nothing here is a pass/fail test.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .core import _pct, _pid_cpu, machine_busy

STUDIO = "0x00000000000000000000000000000000000057d1"
AWAIT = "AWAIT_TX_CONFIRM"
MODES = ("automine", "block", "recon")


@dataclass
class ChainSettings:
    signers: tuple[int, ...] = (1, 4, 16)
    per_signer_auto: int = 30
    per_signer_block: int = 10
    block_time: float = 1.0
    recon: int = 1000
    confirmations: int = 1
    poll: float = 0.2
    concurrency: int = 8
    procs: int = 1  # >1: the runners are that many `statemachine-wf worker` processes
    preload: bool = False  # block time: mining paused until every upload is done
    store: str = "sqlite"  # the throughput rows' store: "sqlite" (a file) or "pg" (a schema)
    timeout: float = 300.0
    tmp: str = ""

    @classmethod
    def quick(cls) -> ChainSettings:
        return cls(per_signer_auto=5, per_signer_block=3, recon=200)


@dataclass
class Row:
    name: str
    mode: str  # "automine" | "block" | "recon"
    signers: int
    workflows: int
    seconds: float
    txs: int = 0
    window: float = 0.0  # first tx recorded -> last confirmation
    submit_ms: list[float] = field(default_factory=list)
    total_ms: list[float] = field(default_factory=list)
    cpu: float = 0.0  # this process (runner threads + watcher)
    anvil_cpu: float = 0.0
    busy: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def wf_per_s(self) -> float:
        return self.workflows / self.seconds if self.seconds > 0 else 0.0


# -- nodes ------------------------------------------------------------------------------
@dataclass
class Chain:
    node: Any  # AnvilNode
    keys: list[str]  # anvil's public dev keys; never printed
    contract: str
    eth: Any  # EthereumClient

    def rpc(self, method: str, *params: Any) -> Any:
        response: Any = self.eth.w3.provider.make_request(method, list(params))
        if "error" in response:
            raise RuntimeError(f"{method}: {response['error']}")
        return response["result"]

    def pool_pending(self) -> int:
        return int(self.rpc("txpool_status")["pending"], 16)


def _read_keys(path: Path, accounts: int, timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, ValueError):
            keys = list(json.loads(path.read_text())["private_keys"])
            if len(keys) >= accounts:
                path.unlink()
                return keys
        if time.monotonic() > deadline:
            raise RuntimeError(f"anvil wrote no keys to {path}")
        time.sleep(0.05)


def start_chain(tmp: str, tag: str, *, block_time: float | None, accounts: int) -> Chain:
    """anvil with ``accounts`` funded dev accounts and ChaosChain deployed by the last one."""
    from examples.contracts import chaoschain_artifact
    from statemachine_wf.adapters.ethereum import EthereumClient, LocalSigner, deploy, start_anvil

    cfg = Path(tmp) / f"anvil-{tag}.json"
    node = start_anvil(
        block_time=block_time,
        extra_args=("--accounts", str(accounts), "--config-out", str(cfg)),
        ready_timeout=60.0,
    )
    try:
        keys = _read_keys(cfg, accounts)
        eth = EthereumClient.from_url(node.url, timeout=30.0)
        artifact = chaoschain_artifact()
        deployer = LocalSigner.from_private_key(keys[-1])
        contract = deploy(eth, deployer, artifact.abi, artifact.bytecode, timeout=60)
    except BaseException:
        node.stop()
        raise
    return Chain(node=node, keys=keys, contract=str(contract), eth=eth)


@dataclass
class Arweave:
    node: Any  # ArLocalNode
    wallet: Any  # ArweaveWallet

    def client(self) -> Any:
        from statemachine_wf.adapters.arweave import ArweaveClient

        return ArweaveClient(self.node.url, self.wallet, timeout=30.0)


@contextlib.contextmanager
def arweave(log: Callable[[str], None]) -> Iterator[Arweave]:
    from statemachine_wf.adapters.arweave import ArweaveWallet, start_arlocal

    node = start_arlocal()
    try:
        log("   generating an Arweave wallet ...")
        wallet = ArweaveWallet.generate()
        node.mint(wallet.address, 10**16)
        yield Arweave(node, wallet)
    finally:
        node.stop()


class _Counting:
    """Counts JSON-RPC calls by method (wraps ``HTTPProvider.make_request``)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()


def counting_client(url: str) -> tuple[Any, _Counting]:
    from web3 import Web3

    from statemachine_wf.adapters.ethereum import EthereumClient

    counter = _Counting()

    class CountingHTTPProvider(Web3.HTTPProvider):
        def make_request(self, method: Any, params: Any) -> Any:
            with counter.lock:
                counter.calls[str(method)] += 1
            return super().make_request(method, params)

    provider = CountingHTTPProvider(
        url, request_kwargs={"timeout": 30.0}, exception_retry_configuration=None
    )
    return EthereumClient(Web3(provider)), counter


# -- shared pieces ----------------------------------------------------------------------
def _settings(contract: str, s: ChainSettings, **overrides: Any) -> Any:
    from examples.chaoschain import ChaosChainSettings

    values: dict[str, Any] = {
        "contract_address": contract,
        "confirmations": s.confirmations,
        "poll_interval": s.poll,
        "stuck_after": 600.0,  # no fee bumps: they would measure the bump, not the queue
        "not_found_after": 30.0,
        "stall_retry": 5.0,
    }
    values.update(overrides)
    return ChaosChainSettings(**values)


def _runner(store: Any, eth: Any, ar: Any, signers: list[Any], cs: Any, s: ChainSettings) -> Any:
    from examples.chaoschain import WorkSubmission
    from statemachine_wf import Runner, RunnerOptions

    return Runner(
        store,
        [WorkSubmission],
        options=RunnerOptions(concurrency=s.concurrency, idle_poll=0.5),
        dependencies={
            "eth": eth,
            "arweave": ar,
            "signers": {sg.address.lower(): sg for sg in signers},
            "chaoschain": cs,
        },
    )


def _create(store: Any, signers: list[Any], per_signer: int, label: str) -> list[str]:
    """Start ``per_signer`` WorkSubmissions per signer, round-robin over the signers."""
    from examples.chaoschain import WorkSubmission, data_hash_of
    from statemachine_wf import Client

    client = Client(store, [WorkSubmission])
    tag = uuid.uuid4().hex[:10]
    ids = []
    for j in range(per_signer):
        for i, signer in enumerate(signers):
            text = f"bench {tag} {label}: signer {i} work {j}"
            inp = {
                "studio_address": STUDIO,
                "epoch": 1,
                "signer_address": signer.address,
                "data_hash": data_hash_of(text),
                "evidence": text,
            }
            ids.append(client.start(WorkSubmission, inp))
    return ids


@dataclass
class Db:
    """The store of one throughput row: a SQLite file or a fresh PostgreSQL schema.

    The bench's own probes (statuses, steps) read it with plain SQL beside the runners.
    """

    kind: str  # "sqlite" | "pg"
    path: str = ""
    dsn: str = ""
    schema: str = ""

    @classmethod
    def fresh(cls, s: ChainSettings, tag: str) -> Db:
        if s.store == "pg":
            from .core import fresh_store, pg_dsn

            db = cls(
                "pg", dsn=pg_dsn(), schema=f"swfbench_chain_{tag.replace('-', '_')}_{os.getpid()}"
            )
            fresh_store({"store": "pg", "dsn": db.dsn, "schema": db.schema})
            return db
        return cls("sqlite", path=os.path.join(s.tmp, f"{tag}.db"))

    def open(self) -> Any:
        if self.kind == "pg":
            from statemachine_wf.stores.postgres import PostgresStore

            # The library's default pool (DEFAULT_POOL_SIZE), as a user's runner has it.
            return PostgresStore(self.dsn, schema=self.schema)
        from statemachine_wf.stores.sqlite import SQLiteStore

        return SQLiteStore(self.path)

    def cli(self) -> list[str]:
        """The CLI's ``--db`` (and ``--schema``) for this store."""
        if self.kind == "pg":
            return ["--db", self.dsn, "--schema", self.schema]
        return ["--db", f"sqlite:///{self.path}"]

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "pg":
            import psycopg

            opts = f"-c search_path={self.schema}"
            with psycopg.connect(self.dsn, autocommit=True, options=opts) as conn:
                return list(conn.execute(sql.replace("?", "%s"), params).fetchall())
        lite = sqlite3.connect(self.path, timeout=30)
        try:
            return list(lite.execute(sql, params).fetchall())
        finally:
            lite.close()

    def drop(self) -> None:
        if self.kind == "pg":
            import psycopg
            from psycopg import sql

            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
                )


def _statuses(db: Db) -> Counter[str]:
    rows = db.query("SELECT status, count(*) FROM wf_instances GROUP BY status")
    return Counter({str(k): int(v) for k, v in rows})


def _wait_done(db: Db, n: int, timeout: float, *, interval: float = 0.02) -> Counter[str]:
    """Poll until every instance is terminal (or STALLED/FAILED shows up for long)."""
    deadline = time.monotonic() + timeout
    while True:
        st = _statuses(db)
        if st["COMPLETED"] + st["FAILED"] + st["CANCELLED"] >= n:
            return st
        if time.monotonic() > deadline:
            raise TimeoutError(f"after {timeout:.0f} s: {dict(st)}")
        time.sleep(interval)


def _wait_uploaded(db: Db, n: int, timeout: float) -> None:
    """Until all ``n`` instances are past UPLOAD_EVIDENCE (parked on the slot, or in AWAIT)."""
    deadline = time.monotonic() + timeout
    while True:
        q = (
            "SELECT count(*) FROM wf_instances WHERE step IN (?, ?)"
            " AND status IN ('RUNNING', 'PENDING')"
        )
        past = int(db.query(q, ("SUBMIT_ONCHAIN", AWAIT))[0][0])
        if past >= n:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {past}/{n} uploaded after {timeout:.0f} s")
        time.sleep(0.1)


def _timings(store: Any, ids: list[str]) -> dict[str, Any]:
    """Per instance, from the log: tx recorded, AWAIT completed, created, completed."""
    submit, total, first_tx, last_ok, bumps = [], [], [], [], 0
    for i in ids:
        t_rec = t_conf = t_new = t_done = None
        records = 0
        for e in store.events(i):
            kind = e.event_type
            if kind == "WORKFLOW_CREATED":
                t_new = e.created_at
            elif kind == "PROGRESS_SET":
                progress = e.payload.get("progress", {})
                if any(k.startswith("tx_") for k in progress):
                    records += 1
                    if t_rec is None:
                        t_rec = e.created_at
            elif (
                kind == "STEP_COMPLETED" and e.node == AWAIT and e.payload.get("to") == "COMPLETED"
            ):
                t_conf = e.created_at
            elif kind == "WORKFLOW_COMPLETED":
                t_done = e.created_at
        bumps += max(0, records - 1)
        if t_rec is not None and t_conf is not None:
            submit.append(1000 * (t_conf - t_rec))
            first_tx.append(t_rec)
            last_ok.append(t_conf)
        if t_new is not None and t_done is not None:
            total.append(1000 * (t_done - t_new))
    window = max(last_ok) - min(first_tx) if first_tx else 0.0
    return {"submit_ms": submit, "total_ms": total, "window": window, "extra_txs": bumps}


def _pace(store: Any, ids: list[str]) -> dict[str, Any]:
    """Per signer: its transactions per block, from its first mined block to its last.

    One transaction in flight per signer at depth 1 can do at most one per block; a
    signer below that waited for a claim, an RPC or its slot between two transactions.
    """
    blocks: dict[str, list[int]] = {}
    for i in ids:
        rec = store.get(i)
        if rec is None or rec.progress.get("onchain_block") is None:
            continue
        blocks.setdefault(str(rec.input["signer_address"]).lower(), []).append(
            int(rec.progress["onchain_block"])
        )
    pace = sorted(len(b) / (max(b) - min(b) + 1) for b in blocks.values())
    gaps = [y - x for b in blocks.values() for x, y in zip(sorted(b), sorted(b)[1:], strict=False)]
    return {
        "pace_min": pace[0] if pace else 0.0,
        "pace_p50": _pct(pace, 50) if pace else 0.0,
        "gap_max": max(gaps) if gaps else 0,
        "gap_p50": _pct([float(g) for g in gaps], 50) if gaps else 0.0,
    }


REPO = Path(__file__).resolve().parents[1]


def _workers(s: ChainSettings, ar: Arweave, chain: Chain, keys: list[str], db: Db) -> list[Any]:
    """``s.procs`` CLI workers with the ChaosChain deps from the environment."""
    from examples.chaoschain.deps import ENV_VARS

    wallet = Path(s.tmp) / "arweave-wallet.json"
    if not wallet.exists():
        ar.wallet.save(wallet)
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env.update(
        SWF_ETH_RPC_URL=chain.node.url,
        SWF_CHAOSCHAIN_ADDRESS=chain.contract,
        SWF_ETH_PRIVATE_KEY=",".join(keys),  # public anvil dev keys; only in the env
        SWF_ARWEAVE_URL=ar.node.url,
        SWF_ARWEAVE_WALLET=str(wallet),
        SWF_CHAOSCHAIN_CONFIRMATIONS=str(s.confirmations),
        SWF_CHAOSCHAIN_POLL_INTERVAL=str(s.poll),
    )
    procs = []
    for n in range(s.procs):
        cmd = [
            sys.executable, "-m", "statemachine_wf.cli", *db.cli(),
            "-m", "examples.chaoschain.workflows", "worker",
            "--deps", "examples.chaoschain:dependencies",
            "--concurrency", str(s.concurrency), "--id", f"bench-{n}",
        ]  # fmt: skip
        out = open(os.path.join(s.tmp, f"worker-{n}.log"), "wb")  # noqa: SIM115
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT))
        out.close()
    return procs


def _stop_workers(procs: list[Any]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


# -- (1) + (2): throughput and latency ----------------------------------------------------
def run_throughput(s: ChainSettings, ar: Arweave, chain: Chain, mode: str, k: int) -> Row:
    from statemachine_wf.adapters.ethereum import LocalSigner

    per = s.per_signer_auto if mode == "automine" else s.per_signer_block
    name = f"{mode} {k} signer{'s' if k > 1 else ''}"
    signers = [LocalSigner.from_private_key(key) for key in chain.keys[:k]]
    db = Db.fresh(s, f"{mode}-{k}")
    store = db.open()
    store.migrate()
    ids = _create(store, signers, per, name)
    nonces0 = [chain.eth.nonce(sg.address) for sg in signers]
    client = ar.client()
    procs: list[Any] = []
    runner = None
    if s.procs > 1:
        name += f", {s.procs} procs"
    if db.kind == "pg":
        name += ", pg"
    preload = s.preload and mode == "block"
    if preload:
        # The queue alone: no block until every instance has uploaded its evidence and
        # waits for its signer's slot (or holds it, its tx in the pool).
        name += ", preloaded"
        chain.rpc("evm_setIntervalMining", 0)
    a0, c0, (b0, t0b) = _pid_cpu(chain.node.pid), time.process_time(), machine_busy()
    t0 = time.perf_counter()
    if s.procs > 1:
        procs = _workers(s, ar, chain, chain.keys[:k], db)
    else:
        runner = _runner(store, chain.eth, client, signers, _settings(chain.contract, s), s)
        runner.start()
    try:
        if preload:
            _wait_uploaded(db, len(ids), s.timeout)
            chain.rpc("evm_setIntervalMining", max(1, round(s.block_time)))
            t0 = time.perf_counter()
        st = _wait_done(db, len(ids), s.timeout)
        elapsed = time.perf_counter() - t0
    finally:
        worker_cpu = sum(_pid_cpu(p.pid) for p in procs)
        if runner is not None:
            runner.stop(timeout=30)
        _stop_workers(procs)
    cpu = time.process_time() - c0 + worker_cpu
    anvil_cpu = _pid_cpu(chain.node.pid) - a0
    b1, t1b = machine_busy()
    txs = sum(chain.eth.nonce(sg.address) - n0 for sg, n0 in zip(signers, nonces0, strict=True))
    t = _timings(store, ids)
    pace = _pace(store, ids) if mode == "block" else {}
    client.close()
    store.close()
    if not os.environ.get("SWF_BENCH_KEEP"):  # set it to read the log afterwards
        db.drop()
    row = Row(
        name, mode, k, len(ids), elapsed, txs=txs, window=t["window"],
        submit_ms=t["submit_ms"], total_ms=t["total_ms"], cpu=cpu, anvil_cpu=anvil_cpu,
        busy=(b1 - b0) / max(1, t1b - t0b),
        extra={"per_signer": per, "extra_txs": t["extra_txs"], "procs": s.procs, **pace},
    )  # fmt: skip
    if st["COMPLETED"] != len(ids):
        row.error = f"not all COMPLETED: {dict(st)}"
    return row


# -- (3): start-up reconciliation ---------------------------------------------------------
def run_recon(s: ChainSettings, ar: Arweave, log: Callable[[str], None]) -> Row:
    from statemachine_wf.adapters.ethereum import LocalSigner
    from statemachine_wf.stores.sqlite import SQLiteStore

    n = s.recon
    chain = start_chain(s.tmp, "recon", block_time=None, accounts=n + 1)
    try:
        chain.rpc("evm_setAutomine", False)  # after the deploy: the pool now only fills
        signers = [LocalSigner.from_private_key(key) for key in chain.keys[:n]]
        db = Db("sqlite", path=os.path.join(s.tmp, "recon.db"))
        store = SQLiteStore(db.path)
        store.migrate()
        _create(store, signers, 1, "recon")
        client = ar.client()
        # Build the state: every instance RUNNING in AWAIT with its tx in the pool. A long
        # poll keeps the parked AWAIT checks from eating the CPU meanwhile.
        slow = _settings(chain.contract, s, poll_interval=120.0, not_found_after=3600.0)
        stuck = _runner(store, chain.eth, client, signers, slow, s)
        t0 = time.perf_counter()
        stuck.start()
        try:
            deadline = time.monotonic() + s.timeout
            while True:
                awaiting = _count_at(db, AWAIT)
                if awaiting >= n and chain.pool_pending() >= n:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"only {awaiting}/{n} in {AWAIT} after {s.timeout:.0f} s")
                time.sleep(0.5)
        finally:
            stuck.stop(timeout=60)
        build_s = time.perf_counter() - t0
        st = _statuses(db)
        log(f"   {n} in flight after {build_s:.1f} s ({dict(st)}, pool {chain.pool_pending()})")
        blocks = 0
        while chain.pool_pending() > 0 and blocks < 1000:
            chain.rpc("evm_mine")
            blocks += 1
        # The start-up pass leaves a task waiting out its own timer alone; here the AWAIT
        # polls were parked for minutes, so make them due: a restart after the runner was
        # down longer than the poll interval (with the normal 0.2-1 s poll, any restart).
        _make_due(db)
        # The fresh runner: its own client, every JSON-RPC call counted.
        eth2, counter = counting_client(chain.node.url)
        fresh = _runner(store, eth2, client, signers, _settings(chain.contract, s), s)
        a0, c0, (b0, t0b) = _pid_cpu(chain.node.pid), time.process_time(), machine_busy()
        t1 = time.perf_counter()
        fresh.start()
        try:
            st = _wait_done(db, n, s.timeout, interval=0.01)
            elapsed = time.perf_counter() - t1
        finally:
            fresh.stop(timeout=30)
        cpu, anvil_cpu = time.process_time() - c0, _pid_cpu(chain.node.pid) - a0
        b1, t1b = machine_busy()
        reconciled = _count_events(db, "RECONCILED")
        sent_again = sum(chain.eth.nonce(sg.address) - 1 for sg in signers) + chain.pool_pending()
        client.close()
        store.close()
    finally:
        chain.node.stop()
    row = Row(
        f"start-up reconcile {n} in flight", "recon", n, n, elapsed, cpu=cpu,
        anvil_cpu=anvil_cpu, busy=(b1 - b0) / max(1, t1b - t0b),
        extra={
            "rpc": dict(counter.calls), "rpc_total": sum(counter.calls.values()),
            "reconciled": reconciled, "blocks_mined": blocks, "build_s": build_s,
            "txs_sent_by_fresh_runner": sent_again, "concurrency": s.concurrency,
        },
    )  # fmt: skip
    if st["COMPLETED"] != n:
        row.error = f"not all COMPLETED: {dict(st)}"
    return row


def _make_due(db: Db) -> None:
    conn = sqlite3.connect(db.path, timeout=30)
    try:
        with conn:
            conn.execute("UPDATE wf_tasks SET due_at = ? WHERE due_at > ?", (time.time(), 0))
    finally:
        conn.close()


def _count_at(db: Db, step: str) -> int:
    q = "SELECT count(*) FROM wf_instances WHERE status = 'RUNNING' AND step = ?"
    return int(db.query(q, (step,))[0][0])


def _count_events(db: Db, kind: str) -> int:
    return int(db.query("SELECT count(*) FROM wf_events WHERE event_type = ?", (kind,))[0][0])


# -- the run ----------------------------------------------------------------------------
def run(s: ChainSettings, only: list[str] | None, log: Callable[[str], None]) -> list[Row]:
    modes = only or list(MODES)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SystemExit(f"unknown part(s) {unknown}; known: {list(MODES)}")
    own_tmp = not s.tmp
    if own_tmp:
        s.tmp = tempfile.mkdtemp(prefix="swfbench-chain-")
    rows: list[Row] = []
    try:
        log("-- arlocal ...")
        with arweave(log) as ar:
            for mode in ("automine", "block"):
                if mode not in modes:
                    continue
                block_time = None if mode == "automine" else s.block_time
                log(f"-- anvil ({mode}) ...")
                chain = start_chain(s.tmp, mode, block_time=block_time, accounts=max(s.signers) + 1)
                try:
                    for k in s.signers:
                        rows.append(
                            _guard(
                                lambda c=chain, m=mode, k=k: run_throughput(s, ar, c, m, k), mode, k
                            )
                        )
                        log(f"   {_short(rows[-1])}")
                finally:
                    chain.node.stop()
            if "recon" in modes:
                log(f"-- start-up reconciliation, {s.recon} in flight ...")
                rows.append(_guard(lambda: run_recon(s, ar, log), "recon", s.recon))
                log(f"   {_short(rows[-1])}")
    finally:
        if own_tmp:
            shutil.rmtree(s.tmp, ignore_errors=True)
    return rows


def _guard(fn: Callable[[], Row], mode: str, k: int) -> Row:
    try:
        return fn()
    except Exception as exc:  # a failed part is reported, not fatal
        msg = str(exc).strip().splitlines()
        return Row(f"{mode} {k}", mode, k, 0, 0.0, error=msg[-1] if msg else repr(exc))


def _short(r: Row) -> str:
    if r.error:
        return f"{r.name}: ERROR {r.error}"
    if r.mode == "recon":
        return (
            f"{r.name}: {1000 * r.seconds / r.workflows:.2f} ms/instance, "
            f"{r.extra['rpc_total'] / r.workflows:.1f} RPC/instance"
        )
    return f"{r.name}: {r.wf_per_s / r.signers:.2f} wf/s/signer, {r.txs / r.seconds:.1f} tx/s"


def limit(s: ChainSettings, mode: str) -> str:
    """The per-signer ceiling of one transaction in flight per signer."""
    if mode == "automine":
        return "round trip"
    return f"{1 / (s.confirmations * s.block_time):.2f}"


def table(rows: list[Row], s: ChainSettings) -> str:
    head = (
        f"{'configuration':<26} {'wf':>4} {'s':>6} {'wf/s':>6} {'wf/s/sg':>8} {'tx/s':>6}"
        f" {'tx/s/sg*':>8} {'limit/sg':>10}  {'submit->conf p50/p99 ms':>23}"
        f" {'cpu ms/wf':>10} {'anvil':>6} {'busy':>5}"
    )
    lines = [head, "-" * len(head)] if any(r.mode != "recon" for r in rows) else []
    for r in rows:
        if r.error:
            lines.append(f"{r.name:<26} ERROR: {r.error}")
            continue
        if r.mode == "recon":
            continue
        lat = f"{_pct(r.submit_ms, 50):.0f} / {_pct(r.submit_ms, 99):.0f}" if r.submit_ms else ""
        win = r.txs / r.window / r.signers if r.window > 0 else 0.0
        lines.append(
            f"{r.name:<26} {r.workflows:>4} {r.seconds:>6.1f} {r.wf_per_s:>6.2f}"
            f" {r.wf_per_s / r.signers:>8.2f} {r.txs / r.seconds:>6.2f} {win:>8.2f}"
            f" {limit(s, r.mode):>10}  {lat:>23}"
            f" {1000 * r.cpu / r.workflows:>10.1f} {1000 * r.anvil_cpu / r.workflows:>6.1f}"
            f" {100 * r.busy:>4.0f}%"
        )
    paced = [r for r in rows if r.mode == "block" and not r.error and "pace_min" in r.extra]
    if paced:
        lines += [
            "",
            "per-signer pace (its txs per block, first to last mined block; target 1.00):",
        ]
        for r in paced:
            e = r.extra
            lines.append(
                f"  {r.name:<26} min {e['pace_min']:.2f}  p50 {e['pace_p50']:.2f}"
                f"  blocks between a signer's txs p50 {e['gap_p50']:.0f}, max {e['gap_max']}"
            )
    for r in rows:
        if r.mode != "recon" or r.error:
            continue
        e = r.extra
        per_ms = 1000 * r.seconds / r.workflows
        calls = ", ".join(f"{m} {c / r.workflows:.2f}" for m, c in sorted(e["rpc"].items()))
        lines += [
            "",
            f"start-up reconciliation: {r.workflows} WorkSubmissions RUNNING in {AWAIT}, each "
            f"tx broadcast and since mined ({e['blocks_mined']} blocks); fresh runner, "
            f"{e['concurrency']} threads",
            f"  start() -> all COMPLETED {r.seconds:.2f} s = {per_ms:.2f} ms/instance wall, "
            f"{1000 * r.cpu / r.workflows:.2f} ms CPU/instance (+ anvil "
            f"{1000 * r.anvil_cpu / r.workflows:.2f}), busy {100 * r.busy:.0f}%",
            f"  JSON-RPC {e['rpc_total']} calls = {e['rpc_total'] / r.workflows:.2f}/instance "
            f"({calls}); RECONCILED events {e['reconciled']}; txs sent by the fresh runner "
            f"{e['txs_sent_by_fresh_runner']}",
        ]
        if r.workflows != 1000:
            lines.append(
                f"  EXTRAPOLATED to 1,000 in flight (linear, measured at {r.workflows}): "
                f"~{per_ms:.2f} s"
            )
    lines += [
        "",
        f"confirmations {s.confirmations}, AWAIT poll {s.poll} s, runner {s.concurrency} "
        f"threads, {'PostgreSQL' if s.store == 'pg' else 'SQLite'} store, "
        f"cpus={os.cpu_count()}. sg = signer. tx/s/sg*: txs per "
        "second per signer from the first tx recorded to the last confirmation (the upload "
        "pipeline fill left out).",
        "limit/sg: one tx in flight per signer => at most 1 tx per (confirmations x block "
        "time) per signer; automine has no chain limit (a block per tx), only the round "
        "trip. submit->conf: tx_1 recorded (just before broadcast) -> AWAIT_TX_CONFIRM "
        "completed, from the log. cpu ms/wf: this process (runner+watcher); anvil: the "
        "node's CPU; busy: whole machine.",
    ]
    return "\n".join(lines)


def dump_json(rows: list[Row], path: str) -> None:
    with open(path, "w") as fh:
        json.dump([asdict(r) for r in rows], fh, indent=2)
