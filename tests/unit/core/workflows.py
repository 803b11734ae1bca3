"""Small workflows shared by the core tests."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from statemachine_wf import COMPLETED, StepContext, Workflow, step


class CountInput(BaseModel):
    model_config = ConfigDict(frozen=True)
    n: int


class CountProgress(BaseModel):
    a: int | None = None
    b: str | None = None
    c: bool | None = None


class ThreeSteps(Workflow[CountInput, CountProgress]):
    workflow_type = "test.three.v1"

    @step(initial=True, to="second")
    def first(self, ctx: StepContext[CountInput, CountProgress]) -> str:
        ctx.set(a=ctx.input.n)
        return "second"

    @step(to="third")
    def second(self, ctx: StepContext[CountInput, CountProgress]) -> None:
        ctx.set(b=str(ctx.input.n))

    @step(to=COMPLETED)
    async def third(self, ctx: StepContext[CountInput, CountProgress]) -> str:
        ctx.set(c=True)
        return COMPLETED
