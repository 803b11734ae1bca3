"""The README's live-updates example runs as written and prints the run as it happens."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_live_updates_example(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("### Live updates", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "no python block under Live updates"
    script = tmp_path / "live.py"
    script.write_text(match.group(1))
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[1:] == ["-", "WORKFLOW_CREATED", "RUNNING"]
    assert "greet NODE_COMPLETED RUNNING" in proc.stdout
    assert lines[-2].split()[1:] == ["-", "WORKFLOW_COMPLETED", "COMPLETED"]
    assert lines[-1] == "{'text': 'hello ada'}"
    seqs = [int(line.split()[0]) for line in lines[:-1]]
    assert seqs == sorted(set(seqs))
