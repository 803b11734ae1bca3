"""The README's code and the examples run as a user would run them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run(
        args, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120, check=False
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def readme_block(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split(f"## {heading}", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, f"no python block under {heading}"
    return match.group(1)


def test_readme_quickstart_runs_as_written(tmp_path: Path) -> None:
    script = tmp_path / "quickstart.py"
    script.write_text(readme_block("Quickstart"))
    out = run([sys.executable, str(script)], cwd=tmp_path).stdout
    assert "HELLO ADA" in out
    assert "COMPLETED" in out
    assert "STEP_COMPLETED shout" in out
    # Run again: the idempotency key returns the finished run; nothing runs twice.
    again = run([sys.executable, str(script)], cwd=tmp_path).stdout
    assert "HELLO ADA" not in again
    assert "COMPLETED" in again


def test_readme_first_lines_name_the_two_commands() -> None:
    head = (ROOT / "README.md").read_text().splitlines()[:6]
    assert any(line.startswith("make demo") for line in head)
    assert any(line.startswith("make test") for line in head)
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")


def test_payout_demo(tmp_path: Path) -> None:
    out = run([sys.executable, "-m", "examples.payouts"], cwd=ROOT).stdout
    assert "same idempotency key: same instance" in out
    assert "p-1004 refused, nothing written: amount_cents" in out
    assert re.search(r"p-1001\s+COMPLETED", out)
    assert re.search(r"p-1002\s+COMPLETED", out)
    assert "BankUnavailable: bank timed out] retry in" in out
    assert re.search(r"p-1003\s+FAILED", out)
    ledger = out.split("bank ledger", 1)[1].split("notifications", 1)[0]
    assert ledger.count("pay-p-") == 2


def test_cli_end_to_end_on_sqlite(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {
        "SWF_DATABASE_URL": db,
        "SWF_MODULES": "examples.payouts",
        "SWF_BANK_PATH": str(tmp_path / "bank.db"),
    }
    cli = [sys.executable, "-m", "statemachine_wf.cli"]
    assert "schema at version" in run([*cli, "migrate"], tmp_path, env).stdout
    payload = json.dumps({"payout_id": "p-9", "account": "acct-9", "amount_cents": 700})
    first = run(
        [*cli, "start", "payments.payout.v1", "--input", payload, "--key", "p-9"], tmp_path, env
    ).stdout.strip()
    second = run(
        [*cli, "start", "payments.payout.v1", "--input", payload, "--key", "p-9"], tmp_path, env
    ).stdout.strip()
    assert first == second
    bad = run(
        [*cli, "start", "payments.payout.v1", "--input", '{"payout_id": "x"}'],
        tmp_path,
        env,
        check=False,
    )
    assert bad.returncode == 2
    assert "account" in bad.stderr
    unknown = run([*cli, "start", "nope.v1", "--input", "{}"], tmp_path, env, check=False)
    assert unknown.returncode == 2
    assert "unknown workflow type 'nope.v1'" in unknown.stderr
    assert "PENDING" in run([*cli, "status", first], tmp_path, env).stdout
    run([*cli, "worker", "--until-idle", "--deps", "examples.payouts:dependencies"], tmp_path, env)
    status = json.loads(run([*cli, "status", first, "--json"], tmp_path, env).stdout)
    assert status["status"] == "COMPLETED"
    assert status["progress"]["payment_ref"] == "pay-p-9"
    history = run([*cli, "history", first], tmp_path, env).stdout
    assert "STEP_COMPLETED send_payment#1" in history
    graph = run([*cli, "graph", "payments.payout.v1"], tmp_path, env).stdout
    assert "reserve_funds --> send_payment" in graph
    assert "notify --> [*]" in graph
    assert "verified 1 instance(s): 0 differ" in run([*cli, "verify"], tmp_path, env).stdout
    assert first in run([*cli, "list", "--status", "COMPLETED"], tmp_path, env).stdout
    # Cancel a delayed one at once; retry/resume refuse the wrong status with a clear error.
    later = run(
        [
            *cli,
            "start",
            "payments.payout.v1",
            "--input",
            payload.replace("p-9", "p-10"),
            "--delay",
            "600",
        ],
        tmp_path,
        env,
    ).stdout.strip()
    assert "CANCELLED" in run([*cli, "cancel", later], tmp_path, env).stdout
    refused = run([*cli, "resume", later], tmp_path, env, check=False)
    assert refused.returncode == 2
    assert "only a STALLED instance" in refused.stderr
    assert "rebuilt: CANCELLED" in run([*cli, "rebuild", later], tmp_path, env).stdout
