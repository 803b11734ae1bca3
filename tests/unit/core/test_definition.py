"""Definition time: a malformed workflow class is refused with every problem listed."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from statemachine_wf import COMPLETED, DefinitionError, Workflow, step

from .workflows import ThreeSteps


class In(BaseModel):
    x: int = 0


class Pr(BaseModel):
    y: int | None = None


def test_spec_collects_steps_targets_and_initial() -> None:
    spec = ThreeSteps.spec()
    assert spec.workflow_type == "test.three.v1"
    assert spec.initial == "first"
    assert set(spec.steps) == {"first", "second", "third"}
    assert spec.steps["first"].targets == {"second"}
    assert spec.steps["third"].is_async
    assert not spec.steps["first"].is_async


def test_mermaid_graph() -> None:
    assert ThreeSteps.spec().mermaid() == (
        "stateDiagram-v2\n"
        "    [*] --> first\n"
        "    first --> second\n"
        "    second --> third\n"
        "    third --> [*]\n"
    )


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(DefinitionError) as info:

        class Broken(Workflow[In, Pr]):
            workflow_type = "Not A Type"

            @step(initial=True, to="nowhere")
            def a(self, ctx: object) -> None: ...

            @step(initial=True, to="a")
            def b(self, ctx: object) -> None: ...

            @step()
            def c(self, ctx: object) -> None: ...

    problems = "\n".join(info.value.problems)
    assert "not a versioned dotted name" in problems
    assert "unknown target 'nowhere'" in problems
    assert "more than one initial state" in problems
    assert "state 'c' has no way out" in problems
    assert len(info.value.problems) == 4


def test_unreachable_state_and_no_initial() -> None:
    with pytest.raises(DefinitionError, match="unreachable"):

        class Island(Workflow[In, Pr]):
            workflow_type = "t.island.v1"

            @step(initial=True, to=COMPLETED)
            def a(self, ctx: object) -> None: ...

            @step(to=COMPLETED)
            def lonely(self, ctx: object) -> None: ...

    with pytest.raises(DefinitionError, match="no initial state"):

        class NoStart(Workflow[In, Pr]):
            workflow_type = "t.nostart.v1"

            @step(to=COMPLETED)
            def a(self, ctx: object) -> None: ...


def test_missing_models_and_required_progress_fields() -> None:
    class Required(BaseModel):
        must: int

    with pytest.raises(DefinitionError) as info:

        class Bad(Workflow[In, Required]):
            workflow_type = "t.bad.v1"

            @step(initial=True, to=COMPLETED)
            def a(self, ctx: object) -> None: ...

    assert "progress field 'must' is required" in str(info.value)

    with pytest.raises(DefinitionError, match="no input model"):

        class NoModels(Workflow):  # type: ignore[type-arg]
            workflow_type = "t.nomodels.v1"

            @step(initial=True, to=COMPLETED)
            def a(self, ctx: object) -> None: ...


def test_reserved_and_duplicate_state_names() -> None:
    with pytest.raises(DefinitionError) as info:

        class Reserved(Workflow[In, Pr]):
            workflow_type = "t.reserved.v1"

            @step(initial=True, to="FAILED", name="FAILED")
            def a(self, ctx: object) -> None: ...

            @step(to=COMPLETED, name="FAILED")
            def b(self, ctx: object) -> None: ...

    text = str(info.value)
    assert "reserved" in text
    assert "declared twice" in text


def test_decorator_keeps_the_function() -> None:
    def action(self: object, ctx: object) -> str:
        return "x"

    assert step(to=COMPLETED)(action) is action
