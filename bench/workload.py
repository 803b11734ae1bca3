"""The benchmarked workflow: three no-op steps, importable by spawned processes."""

from __future__ import annotations

import time
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
