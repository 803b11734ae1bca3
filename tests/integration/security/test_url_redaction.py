"""Credentials in RPC and store URLs never reach the database, the logs or an error.

Issue 9 item 8: a step calls an :class:`EthereumClient` whose URL carries an API key in
the path and the query (the hosted-RPC form); the node is a closed local port, so every
call fails with ``RpcUnavailable``. Afterwards no text column of any table, no dead
letter, no log record (DEBUG, all loggers) and no exception text holds the key.
"""

from __future__ import annotations

import logging
import socket
import sqlite3
import traceback
from typing import ClassVar

import pytest
from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    Fail,
    RetryPolicy,
    Runner,
    RunnerOptions,
    Status,
    StepContext,
    Store,
    Workflow,
    step,
)
from statemachine_wf.adapters.arweave.client import ArweaveClient
from statemachine_wf.adapters.arweave.errors import GatewayUnavailable
from statemachine_wf.adapters.ethereum import AnvilNode
from statemachine_wf.adapters.ethereum.client import EthereumClient
from statemachine_wf.adapters.ethereum.errors import RpcUnavailable
from statemachine_wf.definition.workflow import ErrorMap
from statemachine_wf.stores import open_store
from statemachine_wf.stores.sqlite import SQLiteStore

SECRETS = ("PATHKEY7f3a9c", "QUERYKEY2b8d41", "PASSWD9e5c77")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed: nobody listens once the socket is gone


def secret_url(scheme: str = "http") -> str:
    path, query, password = SECRETS
    return f"{scheme}://user:{password}@127.0.0.1:{closed_port()}/v2/{path}?apikey={query}"


class In(BaseModel):
    n: int = 0


class Pr(BaseModel):
    block: int | None = None


class ReadsChain(Workflow[In, Pr]):
    """Reads the head block from the node in its input: retried, then stalled."""

    workflow_type = "t.redact.reads.v1"
    retry_policy = RetryPolicy(initial_delay=0.01, max_delay=0.02, jitter=False, max_attempts=2)
    rpc_url: str  # a dependency, as an application configures its node

    @step(initial=True, to=COMPLETED)
    def read(self, ctx: StepContext[In, Pr]) -> None:
        client = EthereumClient.from_url(self.rpc_url, timeout=2)
        logging.getLogger("t.redact").info("calling %r", client)
        ctx.set(block=client.block_number())


class FailsOnRpc(ReadsChain):
    """The same, with RpcUnavailable mapped to a permanent failure."""

    workflow_type = "t.redact.fails.v1"
    errors: ClassVar[ErrorMap] = {RpcUnavailable: Fail}


def leaks_in_tables(store: Store) -> list[tuple[str, str]]:
    """``(table, column)`` of every text-readable column that holds a secret."""
    found: list[tuple[str, str]] = []
    if store.dialect == "sqlite":
        assert isinstance(store, SQLiteStore)
        conn = sqlite3.connect(store.path)
        try:
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            for table in tables:
                cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
                for col in cols:
                    for secret in SECRETS:
                        (n,) = conn.execute(
                            f'SELECT count(*) FROM "{table}" WHERE CAST("{col}" AS TEXT) LIKE ?',
                            (f"%{secret}%",),
                        ).fetchone()
                        if n:
                            found.append((table, col))
        finally:
            conn.close()
        return found
    import psycopg
    from psycopg import sql

    from statemachine_wf.stores.postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    schema = store.schema
    with psycopg.connect(store.url, autocommit=True) as pg:
        cols = pg.execute(
            "SELECT c.table_name, c.column_name FROM information_schema.columns c"
            " JOIN information_schema.tables t USING (table_schema, table_name)"
            " WHERE c.table_schema = %s AND t.table_type = 'BASE TABLE'",
            (schema,),
        ).fetchall()
        for table, col in cols:
            for secret in SECRETS:
                query = sql.SQL("SELECT count(*) FROM {}.{} WHERE {}::text LIKE %s").format(
                    sql.Identifier(schema), sql.Identifier(table), sql.Identifier(col)
                )
                row = pg.execute(query, (f"%{secret}%",)).fetchone()
                if row and row[0]:
                    found.append((table, col))
    return found


def test_rpc_key_never_reaches_db_logs_or_errors(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = Client(store, [ReadsChain, FailsOnRpc])
    stalled = client.start(ReadsChain, In())
    failed = client.start(FailsOnRpc, In())
    Runner(
        store,
        [ReadsChain, FailsOnRpc],
        options=RunnerOptions(concurrency=2),
        dependencies={"rpc_url": secret_url()},
    ).run_until_idle(timeout=60)

    assert client.get(stalled).status == Status.STALLED
    rec = client.get(failed)
    assert rec.status == Status.FAILED
    assert rec.error is not None
    assert "RPC unavailable" in rec.error["message"]
    assert "127.0.0.1" in rec.error["message"]  # enough to see which node failed

    assert leaks_in_tables(store) == []
    texts = [repr(client.get(i)) for i in (stalled, failed)]
    texts += [str(e) for i in (stalled, failed) for e in client.history(i)]
    texts.append(str(store.dead_letters()))
    texts.append(caplog.text)
    texts += [r.getMessage() for r in caplog.records]
    assert "calling" in caplog.text  # the step's own log line was captured
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


def test_rpc_exception_text_and_traceback_hold_no_key() -> None:
    client = EthereumClient.from_url(secret_url(), timeout=2)
    assert not any(s in repr(client) for s in SECRETS)
    with pytest.raises(RpcUnavailable) as caught:
        client.block_number()
    shown = "".join(traceback.format_exception(caught.value))
    assert "127.0.0.1" in str(caught.value)
    for secret in SECRETS:
        assert secret not in shown


def test_arweave_gateway_key_never_reaches_the_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with ArweaveClient(secret_url(), timeout=2) as client:
        assert not any(s in repr(client) for s in SECRETS)
        with pytest.raises(GatewayUnavailable) as caught:
            client.anchor()
    shown = "".join(traceback.format_exception(caught.value))
    assert "127.0.0.1" in shown
    for secret in SECRETS:
        assert secret not in shown
        assert secret not in caplog.text


@pytest.mark.parametrize(
    "url",
    [
        "postgresq://user:PASSWD9e5c77@db.example/app",  # mistyped scheme
        "postgres:/user:PASSWD9e5c77@db.example/app",
        "postgresql://user:PASSWD9e5c77@[::1:5432/app",  # psycopg echoes the whole URI
        "postgresql://user:PASSWD9e5c77@127.0.0.1:5432/app?sslmod=QUERYKEY2b8d41",
    ],
)
def test_mistyped_store_url_does_not_echo_its_password(url: str) -> None:
    with pytest.raises(ValueError, match="store URL") as caught:
        open_store(url)
    shown = "".join(traceback.format_exception(caught.value))
    for secret in SECRETS:
        assert secret not in shown


@pytest.mark.chain
def test_working_node_debug_logs_hold_no_key(
    anvil_session: AnvilNode, caplog: pytest.LogCaptureFixture
) -> None:
    """A node that answers: web3's and urllib3's DEBUG lines (URI, request line) are clean."""
    _, query, password = SECRETS
    host = anvil_session.url.removeprefix("http://")
    url = f"http://user:{password}@{host}/?apikey={query}"  # anvil answers on / only
    caplog.set_level(logging.DEBUG)
    client = EthereumClient.from_url(url, timeout=5)
    assert client.block_number() >= 0
    assert "HTTP/1.1" in caplog.text  # urllib3's request line was logged, redacted
    for secret in SECRETS:
        assert secret not in caplog.text


def test_psycopg_pool_warnings_hold_no_password(caplog: pytest.LogCaptureFixture) -> None:
    """PostgresStore(url) used directly: the pool's retry warnings quote the URI, redacted."""
    from psycopg_pool import ConnectionPool, PoolTimeout

    import statemachine_wf.stores.postgres  # noqa: F401  (installs the filter, as a store does)

    caplog.set_level(logging.DEBUG)
    pool = ConnectionPool("postgresql://user:PASSWD9e5c77@[::1:5432/app", open=False)
    with pytest.raises(PoolTimeout):
        pool.open(wait=True, timeout=1.0)
    pool.close()
    assert "error connecting" in caplog.text
    assert "PASSWD9e5c77" not in caplog.text
