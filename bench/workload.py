"""The benchmarked workflow: three no-op steps, importable by spawned processes."""

from __future__ import annotations

import time
import types
from typing import Any

from pydantic import BaseModel

from statemachine_wf.definition.workflow import COMPLETED, Workflow, step
from statemachine_wf.runtime.context import StepContext

# Set in a latency-run child: (instance_id, what, perf_counter()) is put here by steps a, c.
REPORT: Any = None
# Set in a child of core.run_group: a shared counter of the workflows whose last step ran
# (a step run again counts again: the database has the last word).
ENDED: Any = None


class BenchInput(BaseModel):
    n: int


class BenchProgress(BaseModel):
    pass


Ctx = StepContext[BenchInput, BenchProgress]


class ThreeSteps(Workflow[BenchInput, BenchProgress]):
    workflow_type = "bench.three.v1"

    @step(initial=True, to="b")
    def a(self, ctx: Ctx) -> str:
        if REPORT is not None:
            REPORT.put((ctx.instance_id, "first", time.perf_counter()))
        return "b"

    @step(to="c")
    def b(self, ctx: Ctx) -> str:
        return "c"

    @step(to=COMPLETED)
    def c(self, ctx: Ctx) -> None:
        if REPORT is not None:
            REPORT.put((ctx.instance_id, "last", time.perf_counter()))
        if ENDED is not None:
            with ENDED.get_lock():
                ENDED.value += 1


ROW = 100
"""Steps of :data:`StepsInARow`: the state machine shaped as ``bench dag``'s chain."""


def _steps_in_a_row(k: int) -> type[Workflow[BenchInput, BenchProgress]]:
    """A workflow of ``k`` no-op steps, ``s0`` to ``s{k-1}``, each handing to the next: the
    chain's shape (one unit after another, each needing the last one's commit) as a state
    machine, so a chain node is compared with a step at the same concurrency."""
    steps: dict[str, Any] = {"workflow_type": f"bench.row{k}.v1", "__module__": __name__}
    for i in range(k):
        last = i == k - 1
        following = COMPLETED if last else f"s{i + 1}"

        def go(self: Any, ctx: Ctx, _to: str = following, _last: bool = last) -> str | None:
            if _last and ENDED is not None:
                with ENDED.get_lock():
                    ENDED.value += 1
            return None if _last else _to

        go.__name__ = go.__qualname__ = f"s{i}"
        steps[f"s{i}"] = step(initial=i == 0, to=following)(go)
    return types.new_class(
        "StepsInARow", (Workflow[BenchInput, BenchProgress],), exec_body=lambda ns: ns.update(steps)
    )


StepsInARow = _steps_in_a_row(ROW)

WORKFLOWS: dict[str, type[Workflow[BenchInput, BenchProgress]]] = {
    "three": ThreeSteps,
    "row": StepsInARow,
}
"""The benchmark's workflows by the name a runner process is told (``spec["workflow"]``)."""
