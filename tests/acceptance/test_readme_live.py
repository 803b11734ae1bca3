"""The README's live-updates example runs as written and prints the run as it happens."""

from __future__ import annotations

import sys
from pathlib import Path

from .test_readme_and_examples import readme_block, run


def test_readme_live_updates_example(tmp_path: Path) -> None:
    script = tmp_path / "live.py"
    script.write_text(readme_block("Live updates"))
    out = run([sys.executable, str(script)], cwd=tmp_path).stdout
    lines = out.splitlines()
    assert lines[0].split()[1:] == ["-", "WORKFLOW_CREATED", "RUNNING"]
    assert "greet NODE_COMPLETED RUNNING" in out
    assert lines[-2].split()[1:] == ["-", "WORKFLOW_COMPLETED", "COMPLETED"]
    assert lines[-1] == "{'text': 'hello ada'}"
    seqs = [int(line.split()[0]) for line in lines[:-1]]
    assert seqs == sorted(set(seqs))
