"""Fixtures of the token payout tests: anvil, the PayoutToken, a store, the checks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from eth_utils.address import to_checksum_address
from web3.contract import Contract

from examples.contracts import payout_token_artifact
from examples.token_payout import PayoutSettings, TokenPayout
from statemachine_wf import Client, Runner, RunnerOptions, Status
from statemachine_wf.adapters.ethereum import AnvilNode, EthereumClient, LocalSigner, deploy
from statemachine_wf.adapters.ethereum.types import keccak_hex
from statemachine_wf.core.store import Store
from statemachine_wf.stores import open_store
from tests.integration.chain.conftest import close_http
from tests.plugins.stores import PG_DSN

SUPPLY = 10**6 * 10**18


def payout_input(n: int, tag: str = "", amount: int | None = None) -> dict[str, Any]:
    """Payout ``n``: its own id and recipient; ``amount`` defaults to ``n + 1`` tokens."""
    return {
        "payout_id": keccak_hex(f"payout-{tag}-{n}"),
        "recipient": to_checksum_address("0x" + keccak_hex(f"recipient-{tag}-{n}")[-40:]),
        "amount": (n + 1) * 10**18 if amount is None else amount,
    }


def tx_nonce_of(progress: dict[str, Any]) -> int:
    """The nonce of the recorded transaction that did it."""
    for n in range(1, 11):
        record = progress.get(f"tx_{n}")
        if record and record["tx_hash"] == progress["onchain_tx_hash"]:
            return int(record["nonce"])
    raise AssertionError(f"no record of {progress.get('onchain_tx_hash')}")


@dataclass
class PayEnv:
    """One test's world: anvil, the token (the treasury deployed it), a store."""

    node: AnvilNode
    eth: EthereumClient
    treasury: LocalSigner
    token: Contract
    store: Store
    client: Client
    settings: PayoutSettings
    db_url: str
    schema: str | None = None  # PostgreSQL: the schema of the tables

    def store_args(self) -> list[str]:
        """How a worker process (worker_main.py) opens the same store."""
        return ["--url", self.db_url, *(["--schema", self.schema] if self.schema else [])]

    def deps(self, **overrides: Any) -> dict[str, Any]:
        out: dict[str, Any] = {
            "eth": self.eth,
            "signers": {self.treasury.address.lower(): self.treasury},
            "payouts": self.settings,
        }
        out.update(overrides)
        return out

    def runner(self, *, concurrency: int = 4, **overrides: Any) -> Runner:
        return Runner(
            self.store,
            [TokenPayout],
            options=RunnerOptions(concurrency=concurrency, idle_poll=0.2, lease=5.0),
            dependencies=self.deps(**overrides),
        )

    def balance(self, address: str) -> int:
        return int(self.token.functions.balanceOf(address).call())

    def paid_events(self) -> list[Any]:
        return list(self.token.events.Paid().get_logs(from_block=0))

    def assert_paid_once(self, ids: list[str], start_nonce: int) -> None:
        """All COMPLETED, each payout id paid exactly once to its recipient with its
        amount, the treasury's balance down by the total, one nonce each, no gap."""
        inputs = [self.client.get(i).input for i in ids]
        for i in ids:
            record = self.client.get(i)
            assert record.status == Status.COMPLETED, (i, record.status, record.error)
            assert self.client.verify(i) == {}
        per_id = Counter("0x" + e.args.payoutId.hex() for e in self.paid_events())
        assert per_id == Counter(inp["payout_id"] for inp in inputs)
        for inp in inputs:
            assert self.balance(inp["recipient"]) == inp["amount"]
        total = sum(inp["amount"] for inp in inputs)
        assert self.balance(self.treasury.address) == SUPPLY - total
        nonces = sorted(tx_nonce_of(self.client.get(i).progress) for i in ids)
        assert nonces == list(range(start_nonce, start_nonce + len(ids)))
        assert self.eth.nonce(self.treasury.address) == start_nonce + len(ids)


def settings_for(token: str, treasury: str, **overrides: Any) -> PayoutSettings:
    base: dict[str, Any] = {
        "confirmations": 1,
        "poll_interval": 0.2,
        "not_found_after": 3.0,
        "stuck_after": 60.0,
        "stall_retry": 2.0,
    }
    base.update(overrides)
    return PayoutSettings(token=token, treasury=treasury, **base)


def open_pay_env(anvil: AnvilNode, db_url: str, schema: str | None = None) -> PayEnv:
    """The token deployed by the treasury on ``anvil``, and the store at ``db_url``."""
    eth = EthereumClient.from_url(anvil.url, timeout=5.0)
    treasury = LocalSigner.from_private_key(anvil.private_keys[0])
    artifact = payout_token_artifact()
    address = deploy(eth, treasury, artifact.abi, artifact.bytecode, SUPPLY)
    store = open_store(db_url, schema=schema)
    store.migrate()
    return PayEnv(
        node=anvil,
        eth=eth,
        treasury=treasury,
        token=eth.contract(address, artifact.abi),
        store=store,
        client=Client(store, [TokenPayout]),
        settings=settings_for(address, treasury.address),
        db_url=db_url,
        schema=schema,
    )


def close_pay_env(env: PayEnv) -> None:
    env.store.close()
    close_http(env.eth)


@pytest.fixture
def pay_env(anvil: AnvilNode, sqlite_path: str) -> Iterator[PayEnv]:
    env = open_pay_env(anvil, f"sqlite:///{sqlite_path}")
    yield env
    close_pay_env(env)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_pay_env(
    request: pytest.FixtureRequest, anvil: AnvilNode, sqlite_path: str
) -> Iterator[PayEnv]:
    """``pay_env`` on each store in turn (PostgreSQL: a fresh schema, dropped after)."""
    if request.param == "sqlite":
        env = open_pay_env(anvil, f"sqlite:///{sqlite_path}")
    else:
        env = open_pay_env(anvil, PG_DSN, schema=request.getfixturevalue("pg_schema"))
    yield env
    close_pay_env(env)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path
