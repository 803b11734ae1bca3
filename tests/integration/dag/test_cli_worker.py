"""The CLI worker runs DAG instances: ``worker --dag-registry MODULE:ATTR`` in a subprocess
takes a saved DAG (and the state machine it runs as a sub-workflow) to the end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from statemachine_wf import Status, Store
from statemachine_wf.dag import DagClient

from . import helpers as h

REPO = Path(__file__).resolve().parents[3]
HELPERS = "tests.integration.dag.helpers"


def cli(store_url: tuple[str, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    url, options = store_url
    cmd = [sys.executable, "-m", "statemachine_wf.cli", "--db", url]
    if "schema" in options:
        cmd += ["--schema", options["schema"]]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, timeout=120, cwd=REPO, env=env
    )


def test_cli_worker_runs_a_saved_dag_until_idle(
    store: Store, store_url: tuple[str, dict[str, str]]
) -> None:
    client = DagClient(store)
    client.save(h.linear(3))
    client.save(h.sub_workflow())
    plain = client.start("linear", {"x": 10})
    nested = client.start("sub_workflow_fail_workflow", h.child_input(4))

    # Workflows alone: the DAG instances are not this worker's to run.
    hosted_only = cli(store_url, "-m", HELPERS, "worker", "--until-idle")
    assert hosted_only.returncode == 0, hosted_only.stderr
    assert client.get(plain).status == Status.RUNNING

    done = cli(
        store_url,
        *("-m", HELPERS, "worker", "--until-idle", "--concurrency", "2"),
        *("--dag-registry", f"{HELPERS}:registry"),
    )
    assert done.returncode == 0, done.stderr
    assert client.get(plain).status == Status.COMPLETED
    assert client.output(plain) == {"result": 13}
    assert client.get(nested).status == Status.COMPLETED
    child = client.output(nested)
    assert child is not None
    assert child["child"]["doubled"] == 8  # the sub-workflow ran in the CLI worker too
    assert client.executions(plain) == {"s": 1, "n0": 1, "n1": 1, "n2": 1, "e": 1}


def test_cli_worker_refuses_a_bad_dag_registry(
    store: Store, store_url: tuple[str, dict[str, str]]
) -> None:
    not_one = cli(store_url, "worker", "--until-idle", "--dag-registry", f"{HELPERS}:calls")
    assert not_one.returncode == 2
    assert f"--dag-registry: {HELPERS}:calls is a Counter, not a Registry" in not_one.stderr
    missing = cli(store_url, "worker", "--until-idle", "--dag-registry", f"{HELPERS}:nope")
    assert missing.returncode == 2
    assert "has no attribute 'nope'" in missing.stderr
    shape = cli(store_url, "worker", "--until-idle", "--dag-registry", HELPERS)
    assert (shape.returncode, "must be MODULE:ATTR" in shape.stderr) == (2, True)
    nothing = cli(store_url, "worker", "--until-idle")
    assert nothing.returncode == 2
    assert "nothing to run" in nothing.stderr
