"""``--json`` on the read commands, and the commands that work through a whole store
(rebuild --all, verify, purge), on both stores; then the same commands on a terminal
(a pseudo-terminal: what a person sees), where they print tables and progress bars, while
``--json`` stays plain JSON."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statemachine_wf import Client, Runner, RunnerOptions, Status, Store
from statemachine_wf.cli import main
from tests.unit.core.workflows import ThreeSteps

ROOT = Path(__file__).resolve().parents[3]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _done(store: Store, n: int = 3) -> tuple[Client, list[str]]:
    client = Client(store, [ThreeSteps])
    ids = [client.start(ThreeSteps, {"n": i}) for i in range(n)]
    Runner(store, [ThreeSteps], options=RunnerOptions(concurrency=2)).run_until_idle(timeout=60)
    return client, ids


def _json(argv: list[str], capsys: pytest.CaptureFixture[str], *args: str) -> object:
    capsys.readouterr()
    assert main([*argv, *args]) == 0, args
    return json.loads(capsys.readouterr().out)


def test_read_commands_print_json(
    store: Store, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    client, ids = _done(store)
    rows = _json(argv, capsys, "list", "--json", "--limit", "2")
    assert isinstance(rows, list)
    assert len(rows) == 2
    assert {r["id"] for r in rows} <= set(ids)
    assert set(rows[0]) == {
        "id",
        "type",
        "status",
        "step",
        "step_attempts",
        "version",
        "input",
        "progress",
        "error",
        "cancel_requested",
        "waiting",
    }
    assert rows[0]["status"] == "COMPLETED"

    store.dead_letter(instance_id=ids[0], envelope={"x": 1}, reason="poison", worker="w")
    letters = _json(argv, capsys, "dead-letters", "list", "--json")
    assert isinstance(letters, list)
    assert [(d["instance_id"], d["reason"]) for d in letters] == [(ids[0], "poison")]
    one = _json(argv, capsys, "dead-letters", "show", str(letters[0]["id"]), "--json")
    assert isinstance(one, dict)
    assert (one["id"], one["envelope"]) == (letters[0]["id"], {"x": 1})

    named = _json(argv, capsys, "history", ids[0], "--lifecycle", "--json")
    assert isinstance(named, list)
    assert named[0]["lifecycle"] == "created"
    assert named[0]["event_type"] == "WORKFLOW_CREATED"
    assert named[-1]["lifecycle"] == "succeeded"
    assert {"seq", "created_at", "worker"} <= set(named[0])
    assert _json(argv, capsys, "verify", "--json") == {"verified": 3, "differ": {}}
    assert _json(argv, capsys, "verify", ids[0], "--json") == {"verified": 1, "differ": {}}

    cancelled = client.start(ThreeSteps, {"n": 7})
    record = _json(argv, capsys, "cancel", cancelled, "--json")
    assert isinstance(record, dict)
    assert (record["id"], record["status"]) == (cancelled, "CANCELLED")


def test_rebuild_many_and_purge_report_counts(
    store: Store, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    client, ids = _done(store)
    capsys.readouterr()
    assert main([*argv, "rebuild", ids[0], ids[1]]) == 0
    assert capsys.readouterr().out == "".join(f"{i} rebuilt: COMPLETED at third\n" for i in ids[:2])
    assert main([*argv, "rebuild", "--all"]) == 0
    assert capsys.readouterr().out == "rebuilt 3 instance(s)\n"
    rebuilt = _json(argv, capsys, "rebuild", "--all", "--json")
    assert isinstance(rebuilt, list)
    assert {r["id"] for r in rebuilt} == set(ids)
    assert {r["status"] for r in rebuilt} == {"COMPLETED"}
    assert main([*argv, "rebuild"]) == 2
    assert "rebuild needs instance ids or --all" in capsys.readouterr().err
    assert main([*argv, "rebuild", ids[0], "--all"]) == 2
    assert "(not both)" in capsys.readouterr().err

    time.sleep(1.1)  # finished more than 1 s ago
    assert _json(argv, capsys, "purge", "--older-than", "1s", "--batch", "2", "--json") == {
        "instances": 3,
        "soft": False,
    }
    assert client.count() == 0
    assert client.list(status=[Status.COMPLETED]) == []


def _on_a_terminal(argv: list[str], *args: str, columns: int = 160) -> str:
    """The command's output on a pseudo-terminal ``columns`` wide (stdout and stderr)."""
    import pty

    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWF_")}
    env.update(PYTHONPATH=str(ROOT), COLUMNS=str(columns), LINES="50", TERM="xterm")
    proc = subprocess.Popen(
        [sys.executable, "-m", "statemachine_wf.cli", *argv, *args],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=env,
        cwd=ROOT,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 0, b"".join(chunks)
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r", "")


def test_a_person_at_a_terminal_sees_tables_and_progress(store: Store, argv: list[str]) -> None:
    _, ids = _done(store)
    listing = _on_a_terminal(argv, "list")
    assert re.search(r"┃ id +┃ type +┃ status +┃ step +┃ attempt +┃", listing)
    for i in ids:
        assert re.search(rf"│ {i} +│ test\.three\.v1 +│ COMPLETED +│", listing)
    history = _on_a_terminal(argv, "history", ids[0])
    assert f"history of {ids[0]}" in history
    assert re.search(r"│ \d+ +│ [0-9: .-]+ +│ WORKFLOW_CREATED +│", history)
    rebuilt = _on_a_terminal(argv, "rebuild", "--all")
    assert re.search(r"rebuilding .*3/3", rebuilt)  # the bar, on stderr
    assert rebuilt.rstrip().endswith("rebuilt 3 instance(s)")
    # --json on a terminal: the JSON alone, no table and no bar.
    quiet = _on_a_terminal(argv, "rebuild", "--all", "--json")
    assert {r["id"] for r in json.loads(quiet)} == set(ids)
    assert json.loads(_on_a_terminal(argv, "list", "--json"))[0]["type"] == "test.three.v1"
    top = _on_a_terminal(argv, "top", "--iterations", "2", "--interval", "0.05")
    assert "instances by status" in top
    assert "instances 3" in top
    assert re.search(r"│ \(empty\) +│ +│ 0 +│ 0 +│ 0 +│", top)  # every task done
    time.sleep(1.1)
    purged = _on_a_terminal(argv, "purge", "--older-than", "1s", "--batch", "2")
    assert re.search(r"purged instances +3 done", purged)  # counted up batch by batch
    assert purged.rstrip().endswith("purged 3 finished instance(s)")


def test_signers_and_dead_letters_as_tables_on_a_terminal(store: Store, argv: list[str]) -> None:
    from tests.integration.core.test_signers_view import A, started

    _, ids = started(store)
    store.dead_letter(instance_id=ids["gone"], envelope={"x": 1}, reason="poison", worker="w")
    shown = _on_a_terminal(argv, "signers")
    assert f"signer {A.split(':')[2]}  chain 31337" in shown
    assert re.search(rf"│ holder +│ {ids['holder']}  t\.signers\.v1  RUNNING +│", shown)
    assert re.search(rf"│ pending +│ 0x{2:064x} +│", shown)
    assert re.search(r"│ nonce +│ 6 +│", shown)
    assert re.search(rf"│ waiting +│ 2 +│\n│ +│ {ids['first']} +│\n│ +│ {ids['second']} +│", shown)
    letters = _on_a_terminal(argv, "dead-letters")
    assert re.search(r"┃ id +┃ at \(UTC\) +┃ instance +┃ reason +┃", letters)
    assert re.search(rf"│ {ids['gone']} +│ poison +│", letters)


def test_migrate_shows_a_bar_over_the_pending_migrations(tmp_path: Path) -> None:
    fresh = ["--db", f"sqlite:///{tmp_path / 'fresh.db'}"]
    first = _on_a_terminal(fresh, "migrate")
    found = re.findall(r"migrating the schema[ ━]*(\d+)/(\d+)", first)
    assert found
    assert found[-1][0] == found[-1][1] != "0"  # every pending migration, one by one
    assert first.rstrip().endswith(f"schema at version {found[-1][1]}")
    again = _on_a_terminal(fresh, "migrate")  # nothing pending: an empty bar
    assert re.findall(r"migrating the schema[ ━]*(\d+)/(\d+)", again)[-1] == ("0", "0")


def test_graph_as_json_names_every_state_and_its_targets(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    graph = _json(
        [*argv, "-m", "examples.chaoschain"],
        capsys,
        "graph",
        "chaoschain.work_submission.v1",
        "--json",
    )
    assert isinstance(graph, dict)
    assert graph["type"] == "chaoschain.work_submission.v1"
    assert graph["initial"] == "UPLOAD_EVIDENCE"
    assert graph["steps"]["UPLOAD_EVIDENCE"] == ["SUBMIT_ONCHAIN"]
    assert graph["steps"]["AWAIT_TX_CONFIRM"] == ["COMPLETED", "SUBMIT_ONCHAIN"]
    assert "[*] --> UPLOAD_EVIDENCE" in graph["mermaid"]
