"""The README's "The step and reconcile API": its example runs, its tables match the code."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from statemachine_wf.runtime.context import ReconcileContext, StepContext

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## The step and reconcile API"


def section() -> str:
    text = (ROOT / "README.md").read_text()
    assert HEADING in text
    return text.split(HEADING, 1)[1].split("\n## ", 1)[0]


def written(fn: Callable[..., Any]) -> str:
    """``name(params)`` as the README writes it: the real signature, hints left out."""
    parts: list[str] = []
    keyword_only = False
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.KEYWORD_ONLY and not keyword_only:
            parts.append("*")
            keyword_only = True
        if p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        elif p.kind is p.VAR_POSITIONAL:
            parts.append(f"*{p.name}")
            keyword_only = True
        elif p.default is not p.empty:
            parts.append(f"{p.name}={p.default!r}")
        else:
            parts.append(p.name)
    return f"{fn.__name__}({', '.join(parts)})"


class _In(BaseModel):
    pass


def public_names(obj: object) -> set[str]:
    """Attributes set in ``__init__`` and public methods and properties."""
    names = {n for n in vars(obj) if not n.startswith("_")}
    return names | {n for n in dir(type(obj)) if not n.startswith("_")}


def test_every_public_name_of_both_contexts_is_in_the_tables() -> None:
    text = section()
    step_ctx: StepContext[_In, _In] = StepContext(
        instance_id="i",
        workflow_type="t.v1",
        step="s",
        attempt=1,
        input=_In(),
        progress={},
        progress_model=_In,
        host=None,  # type: ignore[arg-type]  # never called here
    )
    reconcile_ctx: ReconcileContext[_In, _In] = ReconcileContext(
        instance_id="i",
        workflow_type="t.v1",
        step="s",
        attempt=1,
        input=_In(),
        progress=_In(),
        in_doubt=False,
        reason="startup",
    )
    for ctx in (step_ctx, reconcile_ctx):
        for name in sorted(public_names(ctx)):
            member = getattr(type(ctx), name, None)
            if callable(member):
                assert f"ctx.{written(member)}`" in text, f"{type(ctx).__name__}.{written(member)}"
            else:
                assert f"ctx.{name}`" in text, f"{type(ctx).__name__}.{name}"


def test_the_signatures_are_written_as_in_the_code() -> None:
    text = section()
    for fn in (
        StepContext.set,
        StepContext.save,
        StepContext.hold,
        StepContext.release,
        StepContext.wait_for,
        StepContext.sleep,
        StepContext.sleep_until,
        StepContext.heartbeat,
        ReconcileContext.goto,
        ReconcileContext.complete,
        ReconcileContext.rerun,
        ReconcileContext.unchanged,
    ):
        assert f"ctx.{written(fn)}" in text, written(fn)
    assert "ctx.goto(step, *, progress=None, **evidence)" in text


def test_the_example_runs_as_written(tmp_path: Path) -> None:
    match = re.search(r"```python\n(.*?)```", section(), re.DOTALL)
    assert match, "no python block in the section"
    script = tmp_path / "step_api.py"
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
    found, missing = proc.stdout.splitlines()
    assert "decision='goto'" in found
    assert "to='notify'" in found
    assert "progress={'bank_status': 'found'}" in found
    assert "decision='rerun'" in missing
    assert "'bank': 'unknown reference'" in missing
