"""Producers: priority, run_at, the payload limit, and the one-statement SQL contract.

The SQL contract is exercised exactly as a non-Python producer would: ``psql`` (or the
``sqlite3`` shell) in a subprocess runs the one statement from the README, and a real
runner then completes the run. Bad input through SQL ends in the dead-letter table.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from statemachine_wf import Client, PayloadTooLarge, Runner, RunnerOptions, Status, Store
from statemachine_wf.stores import open_store
from tests.plugins.stores import PG_DSN

from .flows import Echo, run_all, started

SQL_START_PG = (
    "SELECT swf_start('inbox.echo.v1', '{{\"n\": {n}}}'::jsonb, "
    "idempotency_key => '{key}', priority => 5, run_at => now())"
)
SQL_START_SQLITE = (
    "INSERT INTO wf_start (type, input, idempotency_key, priority, run_at) "
    "VALUES ('{type}', '{input}', '{key}', 5, NULL);"
)


def psql(schema: str, statement: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one statement with psql against the test schema (as a producer would)."""
    env = {**os.environ, "PGOPTIONS": f"-c search_path={schema}"}
    return subprocess.run(
        ["psql", PG_DSN, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-c", statement],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=check,
    )


def sqlite_shell(path: str, statement: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sqlite3", "-bail", "-cmd", ".timeout 10000", path, statement],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_priority_lower_runs_first_and_run_at_waits(store: Store) -> None:
    seen: list[tuple[str, int]] = []
    client = Client(store, [Echo])
    later = client.start(Echo, {"n": 0}, run_at=datetime.now(UTC) + timedelta(hours=1))
    low = client.start(Echo, {"n": 1}, priority=200)
    high = client.start(Echo, {"n": 2}, priority=1)
    task = store.task(later)
    assert task is not None
    assert task.due_at > time.time() + 3500
    Echo.seen = seen
    try:
        Runner(store, [Echo], options=RunnerOptions(concurrency=1)).run_until_idle(timeout=30)
    finally:
        Echo.seen = None
    assert [i for i, _ in seen] == [high, low]  # one worker: priority order
    assert client.status(later) == Status.PENDING  # not yet due


def test_run_at_bad_values_write_nothing(store: Store) -> None:
    client = Client(store, [Echo])
    with pytest.raises(ValueError, match="timezone-aware"):
        client.start(Echo, {"n": 1}, run_at=datetime(2030, 1, 1))  # naive: the point
    with pytest.raises(ValueError, match="not both"):
        client.start(Echo, {"n": 1}, run_at=datetime.now(UTC), delay=5)
    assert store.list_instances() == []


def test_oversized_input_is_refused_before_anything_is_written(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWF_MAX_PAYLOAD_BYTES", "1000")
    client = Client(store, [Echo])
    with pytest.raises(PayloadTooLarge, match=r"input is \d+ bytes; the limit is 1000 bytes"):
        client.start(Echo, {"n": 1, "note": "x" * 2000}, idempotency_key="big")
    assert store.list_instances() == []
    assert client.start(Echo, {"n": 1, "note": "x" * 100}, idempotency_key="big")


@pytest.mark.postgres
def test_psql_producer_one_statement_then_a_runner_completes(pg_schema: str) -> None:
    store = open_store(PG_DSN, schema=pg_schema)
    store.migrate()
    runner = started(store, [Echo])  # registers inbox.echo.v1, listens for the NOTIFY
    try:
        out = psql(pg_schema, SQL_START_PG.format(n=21, key="sql-1")).stdout.strip()
        again = psql(pg_schema, SQL_START_PG.format(n=99, key="sql-1")).stdout.strip()
        assert again == out  # idempotent on the key: the same id, nothing new
        record = Client(store).wait(out, timeout=20)
        assert record.status == Status.COMPLETED
        assert record.progress == {"doubled": 42}
        assert record.priority == 5
        history = Client(store).history(out)
        assert [e.event_type for e in history][:2] == ["WORKFLOW_CREATED", "STEP_STARTED"]
        assert history[0].payload["source"] == "sql"
        assert history[1].node == "double"  # the sentinel resolved to the initial step
        assert history[1].worker == runner.worker_id
        assert Client(store).verify(out) == {}
        assert len(store.list_instances()) == 1
    finally:
        runner.stop()
        store.close()


@pytest.mark.postgres
def test_psql_bad_input_ends_in_dead_letters(pg_schema: str) -> None:
    store = open_store(PG_DSN, schema=pg_schema)
    store.migrate()
    runner = started(store, [Echo])
    try:
        unknown = psql(
            pg_schema, "SELECT swf_start('inbox.nobody.v1', '{\"n\": 1}'::jsonb, 'k-unknown')"
        )
        assert unknown.stdout.strip() == ""  # NULL: nothing started
        assert "unknown workflow type inbox.nobody.v1" in unknown.stderr  # the WARNING
        invalid = psql(
            pg_schema, "SELECT swf_start('inbox.echo.v1', '{\"n\": \"seven\"}'::jsonb)"
        ).stdout.strip()
        record = Client(store).wait(invalid, timeout=20)
        assert record.status == Status.FAILED
        assert record.error is not None
        assert record.error["code"] == "invalid_input"
        # Not JSON at all: refused by the cast, nothing written.
        broken = psql(pg_schema, "SELECT swf_start('inbox.echo.v1', '{n: 1'::jsonb)", check=False)
        assert broken.returncode != 0
        assert "invalid input syntax for type json" in broken.stderr
        assert psql(pg_schema, "SELECT swf_start(NULL, '{}')", check=False).returncode != 0
    finally:
        runner.stop()
    letters = {str(d["reason"]).split(":")[0]: d for d in store.dead_letters()}
    assert set(letters) == {
        "unknown workflow type 'inbox.nobody.v1'",
        "stored input does not validate",
    }
    u = letters["unknown workflow type 'inbox.nobody.v1'"]
    assert u["instance_id"] is None
    assert u["envelope"]["input"] == {"n": 1}
    assert u["envelope"]["idempotency_key"] == "k-unknown"
    assert u["worker"] == "sql:postgres"
    v = letters["stored input does not validate"]
    assert v["instance_id"] == invalid
    assert v["envelope"]["input"] == {"n": "seven"}
    assert v["worker"] == runner.worker_id
    assert "n:" in v["reason"]  # names the field
    assert len(store.list_instances()) == 1
    store.close()


def test_sqlite_shell_producer_one_insert_then_a_runner_completes(tmp_path: Path) -> None:
    path = str(tmp_path / "swf.db")
    store = open_store(f"sqlite:///{path}")
    store.migrate()
    try:
        store.register_types(["inbox.echo.v1"], by="test")  # as `statemachine-wf migrate`
        insert = SQL_START_SQLITE.format(type="inbox.echo.v1", input='{"n": 4}', key="sq-1")
        assert sqlite_shell(path, insert).returncode == 0
        assert sqlite_shell(path, insert).returncode == 0  # the same key: nothing new
        bad = SQL_START_SQLITE.format(type="inbox.echo.v1", input="{n: 1", key="sq-2")
        refused = sqlite_shell(path, bad)
        assert refused.returncode != 0
        assert "input is not JSON" in refused.stderr
        unknown = SQL_START_SQLITE.format(type="inbox.nobody.v1", input='{"n": 1}', key="sq-3")
        assert sqlite_shell(path, unknown).returncode == 0
        invalid = SQL_START_SQLITE.format(type="inbox.echo.v1", input='{"n": []}', key="sq-4")
        assert sqlite_shell(path, invalid).returncode == 0

        rows = {r.idempotency_key: r for r in store.list_instances()}
        assert set(rows) == {"sq-1", "sq-4"}
        run_all(store, [Echo])
        client = Client(store)
        done = client.get(rows["sq-1"].id)
        assert done.status == Status.COMPLETED
        assert done.progress == {"doubled": 8}
        assert client.verify(done.id) == {}
        failed = client.get(rows["sq-4"].id)
        assert failed.status == Status.FAILED
        reasons = sorted(str(d["reason"]) for d in store.dead_letters())
        assert reasons[0].startswith("stored input does not validate: n:")
        assert reasons[1] == "unknown workflow type 'inbox.nobody.v1': no runner has registered it"
    finally:
        store.close()


@pytest.mark.postgres
def test_readme_sql_statement_runs_verbatim_with_psql(pg_schema: str) -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme.split("## Inbox", 1)[1]
    match = re.search(r"```sql\n(.*?)```", section, re.DOTALL)
    assert match, "no sql block in the README's Inbox section"
    statement = match.group(1)
    store = open_store(PG_DSN, schema=pg_schema)
    store.migrate()
    try:
        store.register_types(["billing.invoice.v1"], by="test")
        instance_id = psql(pg_schema, statement).stdout.strip()
        assert psql(pg_schema, statement).stdout.strip() == instance_id
        record = Client(store).get(instance_id)
        assert (record.type, record.input, record.priority) == (
            "billing.invoice.v1",
            {"invoice": 7},
            10,
        )
        assert record.idempotency_key == "invoice:7"
        task = store.task(instance_id)
        assert task is not None
        assert 200 < task.due_at - time.time() <= 300  # run_at => now() + 5 minutes
    finally:
        store.close()
