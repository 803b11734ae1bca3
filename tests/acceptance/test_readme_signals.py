"""The README's "Signals, timers and waits" example runs as written."""

from __future__ import annotations

import sys
from pathlib import Path

from .test_readme_and_examples import readme_block, run


def test_readme_signals_example_runs(tmp_path: Path) -> None:
    script = tmp_path / "signals.py"
    script.write_text(readme_block("Signals, timers and waits"))
    out = run([sys.executable, str(script)], cwd=tmp_path).stdout
    assert out.startswith("COMPLETED ann {")
    assert "'applied': 2" in out  # the signal and the cooling-off timer
    assert "'stale': 0" in out
