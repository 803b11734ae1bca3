"""``evolve`` builds what ``dataclasses.replace`` builds, or hands the work to it."""

from __future__ import annotations

import dataclasses
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statemachine_wf.core.dag_interpret import DagDecision, LogView, NodeTask
from statemachine_wf.core.evolve import _plan, evolve
from statemachine_wf.core.records import InstanceRecord
from statemachine_wf.definition.events import Ev, NewEvent, Status


def _instance(**over: Any) -> InstanceRecord:
    values: dict[str, Any] = dict(
        id="i1", type="t", kind="dag", status=Status.RUNNING, step=None, step_attempts=0,
        attempts={}, version=1, input={"a": 1}, progress={}, error=None,
        cancel_requested=False, idempotency_key=None, priority=0, parent_id=None,
        created_at=1.0, updated_at=2.0,
    )  # fmt: skip
    return InstanceRecord(**{**values, **over})


@given(
    version=st.integers(0, 10**9),
    status=st.sampled_from(list(Status)),
    waiting=st.none() | st.text(max_size=5),
    progress=st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
)
def test_an_instance_record_evolves_as_replace_makes_it(
    version: int, status: Status, waiting: str | None, progress: dict[str, int]
) -> None:
    record = _instance(waits={"w": {"token": "x"}}, trace_context="tc")
    changes: dict[str, Any] = dict(
        version=version, status=status, waiting=waiting, progress=progress
    )
    for n in range(len(changes) + 1):
        some = dict(list(changes.items())[:n])
        got, want = evolve(record, **some), dataclasses.replace(record, **some)
        assert got == want
        assert type(got) is InstanceRecord
        # The same objects, not copies (as replace): a field not changed is shared.
        assert all(getattr(got, f.name) is getattr(want, f.name) for f in dataclasses.fields(got))
    assert record == _instance(waits={"w": {"token": "x"}}, trace_context="tc")  # untouched


def test_the_dag_records_evolve_as_replace_makes_them() -> None:
    event = NewEvent(Ev.NODE_COMPLETED, "a", 1, {"output": 1})
    decision = DagDecision(done="a", dispatch=(NodeTask("b"),), events=(event,))
    more = (NewEvent(Ev.NODE_STARTED, "b", 1, {"failures": 0}),)
    assert evolve(decision, events=(*decision.events, *more)) == dataclasses.replace(
        decision, events=(*decision.events, *more)
    )
    view = LogView(input={"x": 1}, definition={"nodes": []})
    view.values["a"] = 1
    copy = evolve(view, values={"a": 2})
    assert copy == dataclasses.replace(view, values={"a": 2})
    assert view.values == {"a": 1}


def test_a_name_that_is_not_a_field_is_refused_as_replace_refuses_it() -> None:
    with pytest.raises(TypeError, match="'versoin'"):
        evolve(_instance(), versoin=2)
    with pytest.raises(TypeError):
        dataclasses.replace(_instance(), versoin=2)  # type: ignore[call-arg]


@dataclass
class _Checked:
    a: int
    b: int = 0
    seen: list[int] = field(default_factory=list, compare=False)

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a must not be negative")
        self.seen.append(self.a)


def test_post_init_runs_on_the_new_instance() -> None:
    made = evolve(_Checked(1), a=2)
    assert made.a == 2
    assert made.seen == [1, 2]
    with pytest.raises(ValueError, match="negative"):
        evolve(_Checked(1), a=-1)


@dataclass
class _WithInitVar:
    a: int
    b: int = 0
    scale: InitVar[int] = 1

    def __post_init__(self, scale: int) -> None:
        self.b *= scale


@dataclass(kw_only=True)
class _KeywordOnly:
    a: int
    b: int


@dataclass
class _NotInInit:
    a: int
    b: int = field(init=False, default=3)


@pytest.mark.parametrize("cls", [_WithInitVar, _KeywordOnly, _NotInInit])
def test_a_class_whose_init_is_not_its_fields_goes_to_replace(cls: type) -> None:
    assert _plan(cls) is None
    obj = cls(a=1, b=2) if cls is not _NotInInit else cls(a=1)
    assert evolve(obj, a=5) == dataclasses.replace(obj, a=5)
