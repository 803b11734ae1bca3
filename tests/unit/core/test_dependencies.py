"""Workflows declare their dependencies; a runner without them refuses to start."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest
from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    MissingDependencies,
    Runner,
    RunnerOptions,
    StepContext,
    Workflow,
    WorkflowError,
    step,
)
from statemachine_wf.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from decimal import Decimal  # only for type checkers: unresolvable at run time


class In(BaseModel):
    n: int = 0


class Out(BaseModel):
    done: bool | None = None


class Bank:
    def pay(self) -> str:
        return "paid"


class Pays(Workflow[In, Out]):
    workflow_type = "deps.pays.v1"
    limit: ClassVar[int] = 3  # a ClassVar: not a dependency
    label: str = "pays"  # has a value: not a dependency
    _cache: dict[str, Any]  # private: not a dependency

    bank: Bank
    audit: list[str]

    @step(initial=True, to=COMPLETED)
    def pay(self, ctx: StepContext[In, Out]) -> None:
        self.audit.append(self.bank.pay())
        ctx.set(done=True)


class PaysMore(Pays):
    workflow_type = "deps.pays_more.v1"
    rates: Decimal  # resolvable only under TYPE_CHECKING: read as written
    scale: ClassVar[Decimal]  # read as written too, and still a ClassVar


class Plain(Workflow[In, Out]):
    workflow_type = "deps.plain.v1"

    @step(initial=True, to=COMPLETED)
    def go(self, ctx: StepContext[In, Out]) -> None: ...


def test_annotations_without_a_value_are_the_dependencies() -> None:
    assert Pays.spec().dependencies == {"bank", "audit"}
    assert PaysMore.spec().dependencies == {"bank", "audit", "rates"}  # inherited too
    assert Plain.spec().dependencies == frozenset()


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = SQLiteStore(str(tmp_path / "deps.db"))
    s.migrate()
    yield s
    s.close()


def test_runner_refuses_to_start_naming_each_workflow_and_what_it_misses(store: Any) -> None:
    with pytest.raises(MissingDependencies) as caught:
        Runner(store, [Pays, PaysMore, Plain], dependencies={"audit": []})
    err = caught.value
    assert isinstance(err, WorkflowError)
    assert err.missing == {"deps.pays.v1": ["bank"], "deps.pays_more.v1": ["bank", "rates"]}
    assert "deps.pays.v1 needs: bank" in str(err)
    assert "deps.pays_more.v1 needs: bank, rates" in str(err)
    assert "given: audit" in str(err)
    assert store.registered_types() == []  # nothing was started or written


def test_runner_with_every_dependency_runs(store: Any) -> None:
    from statemachine_wf import Client

    audit: list[str] = []
    iid = Client(store).start(Pays, {"n": 1})
    Runner(store, [Pays, Plain], dependencies={"bank": Bank(), "audit": audit}).run_until_idle(
        timeout=30
    )
    assert Client(store).status(iid) == "COMPLETED"
    assert audit == ["paid"]


def test_a_runner_checks_only_the_types_it_takes(store: Any) -> None:
    Runner(store, [Pays, Plain], options=RunnerOptions(prefixes=("deps.plain.",)))
