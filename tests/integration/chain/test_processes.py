"""Runner processes: SIGKILL at every WorkSubmission boundary; one signer, two runners."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from statemachine_wf import Client, Status
from statemachine_wf.adapters.arweave import ArLocalNode, ArweaveWallet
from statemachine_wf.adapters.arweave.steps import REANCHOR_SLOTS
from statemachine_wf.adapters.ethereum import (
    AnvilNode,
    ContractArtifact,
    EthereumClient,
    LocalSigner,
    deploy,
    start_anvil,
)
from statemachine_wf.core.store import Store
from statemachine_wf.stores import open_store

from .conftest import Env, close_http, wait_for
from .flows import QuickWork, work_input
from .procs import Workers
from .worker_main import POINTS

pytestmark = [pytest.mark.chain, pytest.mark.crash]


def all_completed(store: Store, ids: list[str]) -> bool:
    return all((r := store.get(i)) is not None and r.status == Status.COMPLETED for i in ids)


def assert_exactly_once(
    client: Client, eth: EthereumClient, env_events: list[object], ids: list[str], start: int
) -> None:
    """COMPLETED, one submitWork per data hash, consecutive nonces, one upload each."""
    signer = client.get(ids[0]).input["signer_address"]
    for i in ids:
        assert client.get(i).status == Status.COMPLETED
        assert client.verify(i) == {}
    per_hash = Counter("0x" + e.args.dataHash.hex() for e in env_events)  # type: ignore[attr-defined]
    assert per_hash == Counter(client.get(i).input["data_hash"] for i in ids)
    assert set(per_hash.values()) == {1}
    nonces = sorted(
        r["nonce"]
        for i in ids
        for n in range(1, 11)
        if (r := client.get(i).progress.get(f"tx_{n}"))
        and r["tx_hash"] == client.get(i).progress["onchain_tx_hash"]
    )
    assert nonces == list(range(start, start + len(ids)))  # no gap, none twice
    assert eth.nonce(signer) == start + len(ids)


def recorded_uploads(env: Env, instance_id: str) -> list[tuple[str, int]]:
    """Every upload the instance recorded, oldest first: (arweave id, reward)."""
    progress = env.progress(instance_id)
    out = [(progress["arweave_tx_id"], int(progress["arweave_reward"]))]
    for slot in REANCHOR_SLOTS:
        if (record := progress.get(slot)) is not None:
            out.append((record["tx_id"], int(record["reward"])))
    return out


def uploads_held(env: Env, instance_id: str) -> list[tuple[str, int]]:
    """The recorded uploads the gateway holds (pending or mined).

    arlocal answers 404 when one of its route handlers throws (it logs the error and
    sets no status), so a ``not_found`` is asked again before it counts; an upload
    that was never taken also shows in the wallet's balance, which the test checks.
    """

    def held(tx_id: str) -> bool:
        for _ in range(5):
            if env.arweave.status(tx_id).kind != "not_found":
                return True
            time.sleep(0.2)
        return False

    return [(tx_id, reward) for tx_id, reward in recorded_uploads(env, instance_id) if held(tx_id)]


def diagnosis(env: Env, instance_id: str) -> str:
    """What a failure needs: the instance's history and arlocal's error output."""
    lines = [f"history of {instance_id}:"]
    lines += [
        f"  {e.event_type} {e.node} {e.worker} {e.payload} {e.error or ''}"
        for e in env.client.history(instance_id)
    ]
    log = env.arlocal.workdir / "stderr.log"
    tail = log.read_text(errors="replace").splitlines()[-40:] if log.is_file() else []
    return "\n".join([*lines, "arlocal stderr (last 40 lines):", *tail])


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_each_boundary_then_restart(chain_env: Env, tmp_path: Path, point: str) -> None:
    env = chain_env
    wallet_file = tmp_path / "wallet.json"
    env.wallet.save(wallet_file)
    balance = env.arweave.balance()
    start = env.eth.nonce(env.signer.address)
    ids = [
        env.client.start(QuickWork, work_input(n, env.signer.address, tag=point)) for n in range(2)
    ]
    common = [
        "--url", env.db_url,
        "--rpc", env.node.url,
        "--gateway", env.arlocal.url,
        "--contract", env.contract.address,
        "--wallet", str(wallet_file),
    ]  # fmt: skip
    with Workers(tmp_path, common, env.node.private_keys[0]) as workers:
        doomed = workers.spawn("w1", "--chaos", point)
        try:
            code = doomed.wait(timeout=60)
        except Exception:
            raise AssertionError(f"{point} never reached:\n{workers.tail(doomed)}") from None
        assert code == -signal.SIGKILL, workers.tail(doomed)
        survivor = workers.spawn("w1")  # same worker id: its dead leases are due at once
        wait_for(lambda: all_completed(env.store, ids), timeout=60, what="all completed")
        workers.stop(survivor)
    assert_exactly_once(env.client, env.eth, env.work_events(), ids, start)
    # No orphan upload: of each instance's recorded uploads, the gateway holds exactly one,
    # the one that counts (the latest: a re-anchor signs a second only when the gateway
    # never took the first), and the wallet paid for exactly those.
    rewards = 0
    for i in ids:
        held, latest = uploads_held(env, i), recorded_uploads(env, i)[-1]
        assert held == [latest], f"{i}: gateway holds {held}\n{diagnosis(env, i)}"
        rewards += sum(reward for _, reward in held)
    assert balance - env.arweave.balance() == rewards, "\n".join(diagnosis(env, i) for i in ids)
    reconciled = [e for i in ids for e in env.client.history(i) if e.event_type == "RECONCILED"]
    assert reconciled, "the restarted runner reconciled the step in doubt"


@pytest.fixture
def anvil_1s() -> Iterator[AnvilNode]:
    """anvil mining one block per second (transactions wait in the pool until then)."""
    node = start_anvil(block_time=1)
    try:
        yield node
    finally:
        node.stop()


@pytest.mark.postgres
@pytest.mark.slow
def test_one_signer_twenty_workflows_two_runner_processes(
    anvil_1s: AnvilNode,
    arlocal_session: ArLocalNode,
    arweave_wallet: ArweaveWallet,
    chaoschain: ContractArtifact,
    pg_dsn: str,
    pg_schema: str,
    tmp_path: Path,
) -> None:
    eth = EthereumClient.from_url(anvil_1s.url, timeout=5.0)
    signer = LocalSigner.from_private_key(anvil_1s.private_keys[0])
    address = deploy(eth, LocalSigner.from_private_key(anvil_1s.private_keys[1]), chaoschain.abi,
                     chaoschain.bytecode)  # fmt: skip
    contract = eth.contract(address, chaoschain.abi)
    arlocal_session.mint(arweave_wallet.address, 10**14)
    wallet_file = tmp_path / "wallet.json"
    arweave_wallet.save(wallet_file)
    store = open_store(pg_dsn, schema=pg_schema)
    store.migrate()
    client = Client(store, [QuickWork])
    start = eth.nonce(signer.address)
    ids = [client.start(QuickWork, work_input(n, signer.address, tag="serial")) for n in range(20)]

    in_pool: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        # The node's own view: how many of this signer's transactions wait in its pool.
        while not stop.is_set():
            in_pool.append(eth.pending_count(signer.address))
            stop.wait(0.05)

    common = [
        "--url", pg_dsn, "--schema", pg_schema,
        "--rpc", anvil_1s.url,
        "--gateway", arlocal_session.url,
        "--contract", address,
        "--wallet", str(wallet_file),
    ]  # fmt: skip
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with Workers(tmp_path, common, anvil_1s.private_keys[0]) as workers:
            runners = [workers.spawn("a"), workers.spawn("b")]
            wait_for(lambda: all_completed(store, ids), timeout=120, what="20 completed")
            for proc in runners:
                workers.stop(proc)
    finally:
        stop.set()
        sampler.join()
    assert len(in_pool) > 100
    assert max(in_pool) == 1  # one in flight at a time, and we did see it in flight
    events = list(contract.events.WorkSubmitted().get_logs(from_block=0))
    assert_exactly_once(client, eth, events, ids, start)
    workers_seen = {e.worker for i in ids for e in client.history(i) if e.worker}
    assert {w for w in workers_seen if w in ("a", "b")} == {"a", "b"}  # both runners worked
    close_http(eth)  # before the store: its head watcher may be using it (conftest)
    store.close()
