"""Instructions a unit of work, counted under valgrind: ``python -m bench instructions``.

The timings here move by a third between runs minutes apart (bench/README.md, sessions 55
and 65), so a change of a few percent is judged by the instructions the runner's process
executes instead, which do not depend on the neighbours. Each workload runs twice in a
fresh interpreter under ``valgrind --tool=cachegrind --cache-sim=no``, at a small and a
larger size; the difference over the units between them is one unit's instructions,
start-up and set-up cancelled out. Two runs of one commit agreed within 0.6% here.

- ``loop``: ``python -m bench loop`` (one DAG loop instance, one runner of one worker):
  instructions a loop iteration, which is two node commits.
- ``steps``: ``python -m bench profile --no-profile --concurrency 1`` (three-step
  workflows, one worker, so no run shares statements differently from another):
  instructions a step.

On PostgreSQL only the runner's process is counted, not the server's. Needs valgrind
(Debian: ``apt-get install valgrind``); nothing here asserts anything.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")

WORKLOADS: dict[str, tuple[str, int, int, int]] = {
    # name: (unit, small size, large size, units a size)
    "loop": ("loop iteration", 100, 300, 1),
    "steps": ("step", 100, 300, 3),
}


def _command(workload: str, store: str, size: int, dsn: str) -> list[str]:
    dsn_args = ["--dsn", dsn] if dsn else []
    if workload == "loop":
        return ["loop", "--stores", store, "--iterations", str(size), *dsn_args]
    return [
        "profile", "--store", store, "--n", str(size), "--no-profile", "--concurrency", "1",
        *dsn_args,
    ]  # fmt: skip


def count(workload: str, store: str, size: int, dsn: str = "") -> int:
    """The instructions of one run of ``workload`` at ``size``, under cachegrind."""
    cmd = [
        "valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
        sys.executable, "-m", "bench", *_command(workload, store, size, dsn),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict layouts every run
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    found = _REFS.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(
            f"{' '.join(cmd[5:])} under valgrind failed (rc {done.returncode}): "
            f"{done.stderr.strip()[-500:]}"
        )
    return int(found.group(1).replace(",", ""))


def run(workloads: list[str], stores: list[str], repeat: int = 2, dsn: str = "") -> str:
    if shutil.which("valgrind") is None:
        raise SystemExit("python -m bench instructions needs valgrind (apt-get install valgrind)")
    lines = [
        f"{'workload':<8} {'store':<7} {'unit':<15} {'instructions a unit (each run)':>40}",
    ]
    for workload in workloads:
        unit, small, large, per = WORKLOADS[workload]
        for store in stores:
            each = []
            for _ in range(repeat):
                a, b = count(workload, store, small, dsn), count(workload, store, large, dsn)
                each.append((b - a) // ((large - small) * per))
            shown = ", ".join(f"{n:,}" for n in each)
            lines.append(f"{workload:<8} {store:<7} {unit:<15} {shown:>40}")
    return "\n".join(lines)
