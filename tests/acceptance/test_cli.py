"""The ``statemachine-wf`` command as a user meets it: modules from the current directory,
packages searched, workers that refuse to start without their dependencies, quiet logs,
paging, and help that reads as plain text with its defaults."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

Cli = Callable[..., subprocess.CompletedProcess[str]]  # the ``cli`` fixture (conftest.py)

PAYOUT = json.dumps({"payout_id": "p-1", "account": "acct-1", "amount_cents": 500})
FLOW = """
from pydantic import BaseModel

from statemachine_wf import COMPLETED, StepContext, Workflow, step


class In(BaseModel):
    n: int


class Out(BaseModel):
    pass


class Flow(Workflow[In, Out]):
    workflow_type = "shop.flow.v1"

    @step(initial=True, to=COMPLETED)
    def go(self, ctx: StepContext[In, Out]) -> None: ...
"""


def test_help_is_plain_text_and_shows_the_defaults(cli: Cli) -> None:
    top = cli("--help").stdout
    assert "``" not in top
    assert "Run and operate statemachine_wf workflows" in top
    assert "store URL (env SWF_DATABASE_URL) (default: sqlite:///" in " ".join(top.split())
    assert "-vv: DEBUG" in top
    worker = cli("worker", "--help").stdout
    assert "(default: 8)" in worker
    assert "(default: 30.0)" in worker
    assert "--deps" in worker
    assert "SWF_DEPS" in worker
    listing = " ".join(cli("list", "--help").stdout.split())
    assert "(default: 50)" in listing
    assert "--offset OFFSET skip this many rows first (default: 0)" in listing


def test_modules_and_deps_resolve_from_the_current_directory(cli: Cli, tmp_path: Path) -> None:
    # The README's lines, run from the repository root with the installed command.
    iid = cli(
        "-m", "examples.payouts", "start", "payments.payout.v1", "--input", PAYOUT, "--key", "p-1"
    ).stdout.strip()
    cli(
        "-m",
        "examples.payouts",
        "worker",
        "--until-idle",
        "--deps",
        "examples.payouts:dependencies",
    )
    status = json.loads(cli("status", iid, "--json").stdout)
    assert status["status"] == "COMPLETED"
    # A user's own module in their own directory.
    (tmp_path / "myflows.py").write_text(FLOW)
    assert "[*] --> go" in cli("-m", "myflows", "graph", "shop.flow.v1", cwd=tmp_path).stdout


def test_a_package_is_searched_through_its_modules(cli: Cli, tmp_path: Path) -> None:
    pkg = tmp_path / "shop"
    (pkg / "flows").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "flows" / "__init__.py").write_text("")
    (pkg / "flows" / "orders.py").write_text(FLOW)
    (pkg / "__main__.py").write_text("raise SystemExit('__main__ must not be imported')\n")
    assert "[*] --> go" in cli("-m", "shop", "graph", "shop.flow.v1", cwd=tmp_path).stdout
    # The repository's ChaosChain package re-exports its workflows from a submodule.
    graph = cli("-m", "examples.chaoschain", "graph", "chaoschain.work_submission.v1").stdout
    assert "[*] --> UPLOAD_EVIDENCE" in graph


def test_a_module_without_workflows_is_an_error_saying_where_it_looked(
    cli: Cli, tmp_path: Path
) -> None:
    plain = cli("-m", "examples.bank", "worker", "--until-idle", ok=False)
    assert plain.returncode == 2
    assert "-m examples.bank: no Workflow subclass is defined in examples.bank" in plain.stderr
    assert "-m package.module" in plain.stderr
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "__init__.py").write_text("")
    (tmp_path / "empty" / "util.py").write_text("X = 1\n")
    empty = cli("-m", "empty", "worker", "--until-idle", cwd=tmp_path, ok=False)
    assert empty.returncode == 2
    assert "no Workflow subclass is defined in empty, empty.util" in empty.stderr
    missing = cli("-m", "nosuchmodule", "list", ok=False)
    assert missing.returncode == 2
    assert "no module named 'nosuchmodule' (looked in the current directory" in missing.stderr
    assert "Traceback" not in missing.stderr + plain.stderr + empty.stderr


def test_a_worker_without_the_dependencies_its_workflows_declare_refuses_to_start(
    cli: Cli,
) -> None:
    iid = cli("-m", "examples.payouts", "start", "payments.payout.v1", "--input", PAYOUT).stdout
    refused = cli("-m", "examples.payouts", "worker", "--until-idle", ok=False)
    assert refused.returncode == 2
    assert "payments.payout.v1 needs: bank, notifications" in refused.stderr
    assert "--deps MODULE:FUNCTION" in refused.stderr
    status = json.loads(cli("status", iid.strip(), "--json").stdout)
    assert (status["status"], status["step_attempts"]) == ("PENDING", 0)  # nothing ran


def test_the_worker_logs_warnings_only_unless_verbose(cli: Cli) -> None:
    cli("-m", "examples.payouts", "start", "payments.payout.v1", "--input", PAYOUT)
    deps = ("--deps", "examples.payouts:dependencies")
    quiet = cli("-m", "examples.payouts", "worker", "--until-idle", *deps)
    assert " INFO " not in quiet.stderr
    assert " DEBUG " not in quiet.stderr
    info = cli("-v", "-m", "examples.payouts", "worker", "--until-idle", *deps)
    assert "INFO statemachine_wf.runner: runner" in info.stderr
    assert " DEBUG " not in info.stderr
    debug = cli("-vv", "-m", "examples.payouts", "worker", "--until-idle", *deps)
    assert "DEBUG statemachine_wf.cli: hosting payments.payout.v1" in debug.stderr


def test_list_says_when_there_are_more_and_pages(cli: Cli) -> None:
    ids = [
        cli(
            "-m",
            "examples.payouts",
            "start",
            "payments.payout.v1",
            "--input",
            PAYOUT.replace("p-1", f"p-{n}"),
        ).stdout.strip()
        for n in range(3)
    ]
    first = cli("list", "--limit", "2")
    assert len(first.stdout.splitlines()) == 2
    assert "showing 1-2 of 3; see more with --limit/--offset" in first.stderr
    rest = cli("list", "--limit", "2", "--offset", "2")
    assert len(rest.stdout.splitlines()) == 1
    assert "showing 3-3 of 3" in rest.stderr
    everything = cli("list")
    assert {line.split()[0] for line in everything.stdout.splitlines()} == set(ids)
    assert everything.stderr == ""
    assert "showing none of 3 (--offset 5)" in cli("list", "--offset", "5").stderr
    bad = cli("list", "--offset", "-1", ok=False)
    assert bad.returncode == 2
    assert "--limit and --offset must be >= 0" in bad.stderr


def test_help_hides_the_password_of_a_store_url_from_the_env(
    cli: Cli, user_env: dict[str, str]
) -> None:
    user_env["SWF_DATABASE_URL"] = "postgresql://ops:s3cr3t-pw@127.0.0.1:5432/prod?x=k3y"
    top = cli("--help").stdout
    assert "s3cr3t-pw" not in top
    assert "k3y" not in top
    assert "127.0.0.1:5432" in top  # which server is still shown
