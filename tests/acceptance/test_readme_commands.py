"""Every command line of the README, run as printed from the repository root.

The README's ```bash blocks are run as shell scripts (a line may use a variable an
earlier line set), by a user whose project venv is active (its bin directory first on
PATH), against a fresh SQLite store (``SWF_DATABASE_URL``; the lines use the default).
The only change: a long-running ``worker`` line gets ``--until-idle``, so it returns when
nothing is due instead of at SIGTERM. ``make demo`` and ``make test`` are not run here
(``make test`` runs this file; the demos run in test_readme_and_examples.py and
tests/integration/chain/test_demo.py).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README, re.DOTALL)


def lines(block: str) -> list[str]:
    """The block's command lines, continuation lines joined."""
    return [ln for ln in block.replace("\\\n", " ").splitlines() if ln.strip()]


def until_idle(line: str) -> str:
    """A worker line as run here: ``--until-idle`` added when it runs until SIGTERM."""
    command = line.split(" #", 1)[0]
    if re.search(r"\bstatemachine-wf\b.*\bworker\b", command) and "--until-idle" not in command:
        return re.sub(r"\bworker\b", "worker --until-idle", line, count=1)
    return line


def run_script(
    script: str, env: dict[str, str], timeout: float, *, strict: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` from the repository root; ``strict``: stop at the first failing line."""
    proc = subprocess.run(
        ["bash", *(["-euo", "pipefail"] if strict else []), "-x", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    return proc


def test_every_bash_block_is_covered() -> None:
    """Two blocks: the top one and Running; a new block needs its run here."""
    blocks = bash_blocks()
    assert len(blocks) == 2, "a new ```bash block in the README: run it in this file"
    top, running = (lines(b) for b in blocks)
    assert [ln.split()[:2] for ln in top[:2]] == [["make", "demo"], ["make", "test"]]
    assert all(ln.startswith(("statemachine-wf ", "id=$(", "closed=$(")) for ln in running)


def test_running_block_runs_as_printed(user_env: dict[str, str], tmp_path: Path) -> None:
    running = bash_blocks()[1]
    assert "statemachine-wf -m examples.payouts worker --deps examples.payouts:dependencies" in (
        running
    )
    script = "\n".join(until_idle(ln) for ln in lines(running))
    proc = run_script(script, user_env, timeout=150)
    out = proc.stdout
    assert "schema at version" in out
    assert re.search(r"^\S+  payments\.payout\.v1\s+COMPLETED\s+notify$", out, re.M)  # list
    assert "STEP_COMPLETED send_payment#1" in out  # history
    assert "reserve_funds --> send_payment" in out  # graph
    assert "verified 2 instance(s): 0 differ" in out
    assert "rebuilt: COMPLETED at notify" in out
    assert re.search(r"^\S+  CANCELLED$", out, re.M)  # the closed account: retried, cancelled
    assert "purged 0 finished instance(s)" in out
    # The lines used this test's fresh store (SWF_DATABASE_URL), not ./statemachine_wf.db.
    completed = subprocess.run(
        ["statemachine-wf", "list", "--status", "COMPLETED"],
        cwd=ROOT,
        env=user_env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert len(completed.splitlines()) == 1


@pytest.mark.chain
@pytest.mark.slow
def test_top_block_runs_as_printed(user_env: dict[str, str], tmp_path: Path) -> None:
    top = [ln for ln in lines(bash_blocks()[0]) if not ln.startswith("make ")]
    assert len(top) == 1
    assert top[0].startswith("d=$(mktemp -d); python -m examples.chaoschain")
    env = {**user_env, "TMPDIR": str(tmp_path)}  # mktemp's directory goes with the test
    # As typed into an interactive shell: the first command is SIGKILLed on purpose, and
    # the line goes on to the resume, whose status is the line's.
    proc = run_script(top[0], env, timeout=280, strict=False)
    assert "will SIGKILL itself after 4 step transitions" in proc.stdout
    assert "all workflows COMPLETED: True" in proc.stdout
