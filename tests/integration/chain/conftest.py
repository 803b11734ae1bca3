"""Fixtures of the ChaosChain tests: anvil + arlocal + contract + store, and a runner."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from web3.contract import Contract

from examples.chaoschain import ChaosChainSettings
from statemachine_wf import Client, Runner, RunnerOptions, Status
from statemachine_wf.adapters.arweave import ArLocalNode, ArweaveClient, ArweaveWallet
from statemachine_wf.adapters.ethereum import AnvilNode, EthereumClient, LocalSigner, Signer
from statemachine_wf.stores.sqlite import SQLiteStore

from .flows import FLOWS, deps, settings

FUNDING = 100 * 10**12  # 100 AR: thousands of small uploads on arlocal


def rpc(client: EthereumClient, method: str, *params: Any) -> Any:
    """A raw JSON-RPC call (anvil's evm_* and anvil_* methods)."""
    response: Any = client.w3.provider.make_request(method, list(params))  # type: ignore[arg-type]
    assert "error" not in response, response
    return response["result"]


def close_http(eth: EthereumClient) -> None:
    """Close the client's HTTP connections."""
    eth.close()


@dataclass
class Env:
    """One test's world: a chain, a gateway, the contract, a store and its client."""

    node: AnvilNode
    eth: EthereumClient
    signers: list[LocalSigner]
    contract: Contract
    arlocal: ArLocalNode
    wallet: ArweaveWallet
    arweave: ArweaveClient
    store: SQLiteStore
    client: Client
    settings: ChaosChainSettings
    db_url: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def signer(self) -> LocalSigner:
        return self.signers[0]

    def deps(self, **overrides: Any) -> dict[str, Any]:
        out = dict(deps(self.eth, self.arweave, list[Signer](self.signers), self.settings))
        out.update(overrides)
        return out

    def runner(self, *, concurrency: int = 4, **overrides: Any) -> Runner:
        return Runner(
            self.store,
            FLOWS,
            options=RunnerOptions(concurrency=concurrency, idle_poll=0.2, lease=5.0),
            dependencies=self.deps(**overrides),
        )

    def run(self, *, timeout: float = 60.0, **overrides: Any) -> None:
        self.runner(**overrides).run_until_idle(timeout=timeout, settle=0.3)

    @contextlib.contextmanager
    def background(self, **overrides: Any) -> Iterator[Runner]:
        """A runner working in background threads for the ``with`` block."""
        runner = self.runner(**overrides)
        runner.start()
        try:
            yield runner
        finally:
            runner.stop(timeout=10)

    def progress(self, instance_id: str) -> dict[str, Any]:
        return self.client.get(instance_id).progress

    def status(self, instance_id: str) -> Status:
        return self.client.status(instance_id)

    def events(self, instance_id: str) -> list[tuple[str, str | None, dict[str, Any]]]:
        return [(e.event_type, e.node, e.payload) for e in self.client.history(instance_id)]

    def transitions(self, instance_id: str) -> list[str]:
        """``STEP->TARGET`` for each completed step, reconcile goto and completion."""
        out: list[str] = []
        for e in self.client.history(instance_id):
            if e.event_type == "STEP_COMPLETED":
                out.append(f"{e.node}->{e.payload['to']}")
            elif e.event_type == "RECONCILED" and e.payload.get("decision") in ("goto", "complete"):
                out.append(f"reconcile:{e.node}->{e.payload.get('to', 'COMPLETED')}")
        return out

    def work_events(self) -> list[Any]:
        return list(self.contract.events.WorkSubmitted().get_logs(from_block=0))


@pytest.fixture
def chain_env(
    anvil: AnvilNode,
    arlocal_session: ArLocalNode,
    arweave_wallet: ArweaveWallet,
    chaoschain: Any,
    sqlite_path: str,
) -> Iterator[Env]:
    from statemachine_wf.adapters.ethereum import deploy

    eth = EthereumClient.from_url(anvil.url, timeout=5.0)
    signers = [LocalSigner.from_private_key(k) for k in anvil.private_keys[:3]]
    address = deploy(eth, signers[-1], chaoschain.abi, chaoschain.bytecode)
    contract = eth.contract(address, chaoschain.abi)
    arlocal_session.mint(arweave_wallet.address, FUNDING)
    store = SQLiteStore(sqlite_path)
    store.migrate()
    with ArweaveClient(arlocal_session.url, arweave_wallet, timeout=10.0) as arweave:
        yield Env(
            node=anvil,
            eth=eth,
            signers=signers,
            contract=contract,
            arlocal=arlocal_session,
            wallet=arweave_wallet,
            arweave=arweave,
            store=store,
            client=Client(store, list(FLOWS)),
            settings=settings(address),
            db_url=f"sqlite:///{sqlite_path}",
        )
    # The client first: its head watcher's thread may be waking a snoozed step through
    # the store (wake_instances), and a SQLite connection closed under a thread using it
    # crashes the interpreter.
    close_http(eth)
    store.close()


def wait_for(condition: Any, *, timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``condition()`` until true; fail naming ``what`` after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture
def manual_mining(chain_env: Env) -> Iterator[None]:
    """Automine off: transactions wait in the pool until the test calls ``evm_mine``."""
    rpc(chain_env.eth, "evm_setAutomine", False)
    try:
        yield
    finally:
        rpc(chain_env.eth, "evm_setAutomine", True)
