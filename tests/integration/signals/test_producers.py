"""Signals from outside Python: one SQL INSERT through psql and the sqlite3 shell, and the CLI.

The producer contract is documented in ``sql/<dialect>/005_signals.sql``: a plain INSERT
into ``wf_signals``; the table's trigger refuses unknown and ended instances and wakes the
instance that waits. What the runner cannot apply (an unknown name, a payload that is not
JSON) is dead-lettered, never a crash.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from statemachine_wf import Client, Status, Store
from statemachine_wf.definition.events import Ev
from statemachine_wf.stores.postgres import PostgresStore
from statemachine_wf.stores.sqlite import SQLiteStore
from tests.integration.crash.harness import poll_until

from .test_signals import events_of, running, until_waiting
from .workflows import WORKFLOWS, Approval

REPO = Path(__file__).resolve().parents[3]


def psql(dsn: str, schema: str, sql: str, **variables: str) -> subprocess.CompletedProcess[str]:
    """Run ``sql`` with psql in ``schema``; ``:'name'`` in it quotes a variable."""
    cmd = ["psql", dsn, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", f"schema={schema}"]
    for name, value in variables.items():
        cmd += ["-v", f"{name}={value}"]
    script = 'SET search_path TO :"schema";\n' + sql + "\n"
    return subprocess.run(cmd, input=script, capture_output=True, text=True, timeout=60)


def test_psql_insert_signals_a_waiting_instance(pg_dsn: str, pg_schema: str) -> None:
    store = PostgresStore(pg_dsn, schema=pg_schema)
    store.migrate()
    client = Client(store, WORKFLOWS)
    try:
        with running(store):
            plain = client.start(Approval, {"timeout": 60})
            tokened = client.start(Approval, {"timeout": 60, "share_token": True})
            for iid in (plain, tokened):
                until_waiting(store, iid)
            insert = (
                "INSERT INTO wf_signals (instance_id, name, payload)"
                " VALUES (:'id', 'approved', '{\"via\": \"psql\"}');"
            )
            done = psql(pg_dsn, pg_schema, insert, id=plain)
            assert done.returncode == 0, done.stderr
            # With the wait's token, read where the SQL producer can see it.
            with_token = (
                "INSERT INTO wf_signals (instance_id, name, payload, token)"
                " SELECT id, 'approved', '\"tok\"', waiting_token FROM wf_instances"
                " WHERE id = :'id';"
            )
            done = psql(pg_dsn, pg_schema, with_token, id=tokened)
            assert done.returncode == 0, done.stderr
            assert client.wait(plain, timeout=20).progress["approved"] == {"via": "psql"}
            assert client.wait(tokened, timeout=20).progress["approved"] == "tok"

            # Refusals are clear SQL errors and write nothing.
            ended = psql(pg_dsn, pg_schema, insert, id=plain)
            assert ended.returncode != 0
            assert f"workflow instance {plain} is COMPLETED" in ended.stderr
            missing = "00000000-0000-0000-0000-000000000000"
            unknown = psql(pg_dsn, pg_schema, insert, id=missing)
            assert unknown.returncode != 0
            assert f"no workflow instance {missing}" in unknown.stderr

            # A name the workflow does not declare: accepted by SQL, dead-lettered by the
            # runner when the instance waits, and the wait goes on.
            third = client.start(Approval, {"timeout": 60})
            until_waiting(store, third)
            bogus = (
                "INSERT INTO wf_signals (instance_id, name, payload, token)"
                " SELECT id, 'bogus', '1', waiting_token FROM wf_instances WHERE id = :'id';"
            )
            assert psql(pg_dsn, pg_schema, bogus, id=third).returncode == 0
            poll_until(
                lambda: client.signal_counts(third)["dead"] == 1,
                timeout=20,
                what="the unknown signal to be dead-lettered",
            )
            assert client.get(third).waiting == "0"
            client.signal(third, "approved", 3)
            assert client.wait(third, timeout=20).status == Status.COMPLETED
        letters = [d for d in store.dead_letters() if d["instance_id"] == third]
        assert "unknown signal 'bogus'" in letters[0]["reason"]
        assert [e["name"] for e in events_of(store, third, Ev.SIGNAL_REJECTED)] == ["bogus"]
        assert client.signal_counts()["applied"] == 3
    finally:
        store.close()


def test_sqlite3_shell_insert_signals_a_waiting_instance(sqlite_path: str) -> None:
    store = SQLiteStore(sqlite_path)
    store.migrate()
    client = Client(store, WORKFLOWS)

    def shell(sql: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["sqlite3", sqlite_path], input=sql, capture_output=True, text=True, timeout=60
        )

    try:
        with running(store):
            iid = client.start(Approval, {"timeout": 60})
            until_waiting(store, iid)
            # Not JSON: dead-lettered by the runner, the wait goes on.
            bad = shell(
                f"INSERT INTO wf_signals (instance_id, name, payload) "
                f"VALUES ('{iid}', 'approved', 'not json');"
            )
            assert bad.returncode == 0, bad.stderr
            poll_until(
                lambda: client.signal_counts(iid)["dead"] == 1,
                timeout=20,
                what="the unparsable signal to be dead-lettered",
            )
            good = shell(
                f"INSERT INTO wf_signals (instance_id, name, payload) "
                f"VALUES ('{iid}', 'approved', '{{\"via\": \"sqlite3\"}}');"
            )
            assert good.returncode == 0, good.stderr
            assert client.wait(iid, timeout=20).progress["approved"] == {"via": "sqlite3"}
            ended = shell(
                f"INSERT INTO wf_signals (instance_id, name) VALUES ('{iid}', 'approved');"
            )
            assert "the workflow instance has ended" in ended.stderr
            missing = shell("INSERT INTO wf_signals (instance_id, name) VALUES ('x', 'approved');")
            assert "no such workflow instance" in missing.stderr
        letters = [d for d in store.dead_letters() if d["instance_id"] == iid]
        assert letters[0]["reason"].startswith("payload is not JSON")
        assert letters[0]["envelope"]["payload"] == "not json"  # the original, kept
        assert client.signal_counts(iid)["applied"] == 1
    finally:
        store.close()


def _cli(url: str, options: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "statemachine_wf.cli", "--db", url]
    if "schema" in options:
        cmd += ["--schema", options["schema"]]
    cmd += ["-m", "tests.integration.signals.workflows", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO, env=env)


def test_cli_signal_and_counts(store: Store, store_url: tuple[str, dict[str, str]]) -> None:
    url, options = store_url
    client = Client(store, WORKFLOWS)
    iid = client.start(Approval, {"timeout": 60})
    sent = _cli(url, options, "signal", iid, "approved", "--payload", '{"via": "cli"}')
    assert sent.returncode == 0, sent.stderr
    assert int(sent.stdout.strip()) == store.signals(instance_id=iid)[0].id
    bad = _cli(url, options, "signal", iid, "nope")
    assert bad.returncode == 2
    assert "has no signal 'nope'; it accepts ['approved', 'second']" in bad.stderr
    missing = _cli(url, options, "signal", "no-such-id", "approved")
    assert (missing.returncode, "no workflow instance 'no-such-id'" in missing.stderr) == (2, True)
    notjson = _cli(url, options, "signal", iid, "approved", "--payload", "{oops")
    assert notjson.returncode == 2
    assert "--payload is not JSON" in notjson.stderr
    counts = _cli(url, options, "signals", iid, "--list", "--json")
    assert counts.returncode == 0, counts.stderr
    out = json.loads(counts.stdout)
    assert out["counts"]["pending"] == 1
    assert out["signals"][0]["payload"] == {"via": "cli"}
    with running(store):
        assert client.wait(iid, timeout=20).progress["approved"] == {"via": "cli"}
    status = _cli(url, options, "signals")
    assert "applied=1" in status.stdout
