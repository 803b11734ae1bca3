"""The payload limit on the SQL producer paths (migrations 006 and 009), from psql and sqlite3.

``swf_start`` / the ``wf_start`` view and a plain ``INSERT INTO wf_signals`` refuse a
payload over ``wf_settings.max_payload_bytes`` with an error naming the limit, and write
nothing. ``migrate`` writes ``SWF_MAX_PAYLOAD_BYTES`` there when it is set, and leaves an
operator's value alone when it is not.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from psycopg.errors import CheckViolation

from statemachine_wf import Client, PayloadTooLarge, Store
from statemachine_wf.stores import open_store
from statemachine_wf.stores.postgres import PostgresStore
from tests.plugins.stores import PG_DSN

from .flows import Echo
from .test_producers import psql, sqlite_shell

LIMIT = 1000
BIG = json.dumps({"n": 1, "note": "x" * 1200})
SMALL = json.dumps({"n": 1, "note": "x" * 100})


def _nothing_but(store: Store, instance_id: str) -> None:
    """Only the one instance exists, with no signal and no dead letter."""
    assert [r.id for r in store.list_instances()] == [instance_id]
    assert store.signals() == []
    assert store.dead_letters() == []


@pytest.mark.postgres
def test_psql_swf_start_and_signal_insert_refuse_an_oversized_payload(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWF_MAX_PAYLOAD_BYTES", str(LIMIT))
    store = open_store(PG_DSN, schema=pg_schema)
    store.migrate()  # writes the limit for the SQL side
    try:
        store.register_types([Echo.spec().workflow_type], by="test")
        start = "SELECT swf_start('inbox.echo.v1', '{input}'::jsonb, 'k-{key}')"
        big = psql(pg_schema, start.format(input=BIG, key="big"), check=False)
        assert big.returncode != 0
        assert "swf_start: input is 1220 bytes; the limit is 1000 bytes" in big.stderr
        assert "wf_settings.max_payload_bytes" in big.stderr  # the HINT names where it is
        assert store.list_instances() == []
        assert store.dead_letters() == []

        small = psql(pg_schema, start.format(input=SMALL, key="small")).stdout.strip()
        assert store.get(small) is not None
        insert = f"INSERT INTO wf_signals (instance_id, name, payload) VALUES ('{small}', 'go', "
        refused = psql(pg_schema, insert + f"'{BIG}')", check=False)
        assert refused.returncode != 0
        assert "signal 'go' payload is 1220 bytes; the limit is 1000 bytes" in refused.stderr
        version = store.get(small).version  # type: ignore[union-attr]
        _nothing_but(store, small)
        assert psql(pg_schema, insert + f"'{SMALL}')").returncode == 0
        assert [s.payload for s in store.signals()] == [json.loads(SMALL)]
        assert store.get(small).version == version + 1  # type: ignore[union-attr]
    finally:
        store.close()


def test_sqlite3_wf_start_and_signal_insert_refuse_an_oversized_payload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "swf.db")
    monkeypatch.setenv("SWF_MAX_PAYLOAD_BYTES", str(LIMIT))
    store = open_store(f"sqlite:///{path}")
    store.migrate()
    try:
        store.register_types([Echo.spec().workflow_type], by="test")
        start = (
            "INSERT INTO wf_start (type, input, idempotency_key, priority, run_at) "
            "VALUES ('inbox.echo.v1', '{input}', '{key}', 5, NULL);"
        )
        big = sqlite_shell(path, start.format(input=BIG, key="big"))
        assert big.returncode != 0
        assert "wf_start: input over the limit in wf_settings.max_payload_bytes" in big.stderr
        assert store.list_instances() == []
        assert store.dead_letters() == []

        assert sqlite_shell(path, start.format(input=SMALL, key="small")).returncode == 0
        [record] = store.list_instances()
        insert = (
            f"INSERT INTO wf_signals (instance_id, name, payload) VALUES ('{record.id}', 'go', "
        )
        refused = sqlite_shell(path, insert + f"'{BIG}');")
        assert refused.returncode != 0
        assert "payload over the limit in wf_settings.max_payload_bytes" in refused.stderr
        _nothing_but(store, record.id)
        assert sqlite_shell(path, insert + f"'{SMALL}');").returncode == 0
        assert [s.payload for s in store.signals()] == [json.loads(SMALL)]
    finally:
        store.close()


def test_migrate_writes_the_configured_limit_and_keeps_an_operators_value(
    store: Store, store_url: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, options = store_url

    def setting() -> str:
        if isinstance(store, PostgresStore):
            with store._pool.connection() as conn:
                row = conn.execute("SELECT value FROM wf_settings").fetchone()
            assert row is not None
            return str(row["value"])
        with sqlite3.connect(url.removeprefix("sqlite:///")) as raw:
            return str(raw.execute("SELECT value FROM wf_settings").fetchone()[0])

    def update(value: str) -> None:
        if isinstance(store, PostgresStore):
            with store._pool.connection() as conn:
                conn.execute("UPDATE wf_settings SET value = %s", (value,))
            return
        with sqlite3.connect(url.removeprefix("sqlite:///")) as raw:
            raw.execute("UPDATE wf_settings SET value = ?", (value,))

    def migrate_again() -> None:
        other = open_store(url, **options)
        other.migrate()
        other.close()

    assert setting() == str(256 * 1024)  # the Python default
    monkeypatch.setenv("SWF_MAX_PAYLOAD_BYTES", "5000")
    migrate_again()
    assert setting() == "5000"
    monkeypatch.delenv("SWF_MAX_PAYLOAD_BYTES")
    update("700")  # an operator's own value
    migrate_again()
    assert setting() == "700"
    refusal = CheckViolation if isinstance(store, PostgresStore) else sqlite3.IntegrityError
    for bad in ("abc", "0", "-5", "1.5"):  # refused by the table's CHECK
        with pytest.raises(refusal, match="max_payload_bytes"):
            update(bad)
    assert setting() == "700"

    # A client whose own limit is higher meets the database's: the same clear error.
    client = Client(store)
    iid = client.start(Echo, {"n": 1})
    with pytest.raises(PayloadTooLarge, match=r"payload is \d+ bytes; the limit is 700 bytes"):
        client.signal(iid, "go", {"note": "y" * 800})
    assert store.signals() == []
    assert client.signal(iid, "go", {"note": "y" * 100}) > 0
