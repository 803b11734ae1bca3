"""Property: poison through the SQL contract and the signal channel never breaks the runner.

Random poison values (nesting past the limit, a NUL, a lone surrogate, NaN, over the size
limit) sent as SQL rows (``swf_start`` / ``wf_start``, ``INSERT INTO wf_signals``) and as
``Client.signal`` payloads are refused, or dead-lettered, or fail their own instance once;
the runner keeps going and a valid workflow run alongside completes with its side effect
counted exactly once. On both stores.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    InputError,
    Runner,
    Status,
    StepContext,
    Store,
    Workflow,
    step,
)

from .test_poison import nested, raw, sql_start


class In(BaseModel):
    data: Any = None


class Out(BaseModel):
    kept: Any = None


class Effect(Workflow[In, Out]):
    """The valid work: one side effect per instance, counted."""

    workflow_type = "t.poison.prop.effect.v1"
    effects: list[str]
    poisoned: list[str]
    guard: threading.Lock

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, Out]) -> None:
        with self.guard:
            self.effects.append(ctx.instance_id)


class Takes(Workflow[In, Out]):
    """Keeps its input; counts its runs (a poison input must not make it loop)."""

    workflow_type = "t.poison.prop.takes.v1"
    effects: list[str]
    poisoned: list[str]
    guard: threading.Lock

    @step(initial=True, to="wait")
    def keep(self, ctx: StepContext[In, Out]) -> str:
        with self.guard:
            self.poisoned.append(ctx.instance_id)
        ctx.set(kept=ctx.input.data)
        return "wait"

    @step(to=COMPLETED, signals=["go"])
    def wait(self, ctx: StepContext[In, Out]) -> None:
        ctx.wait_for("go", timeout=3600)


FLOWS = [Effect, Takes]


def deep_text(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


# JSON texts a producer in another language might send: each is poison for some store.
poison_texts = st.one_of(
    st.integers(65, 3000).map(
        lambda d: json.dumps({"data": "x"})[:-1] + f', "d": {deep_text(d)}}}'
    ),
    st.text(max_size=5).map(lambda s: json.dumps({"data": s + "\x00"})),  # the escape \u0000
    st.sampled_from(["\ud800", "\udfff", "\udbff"]).map(lambda s: json.dumps({"data": s})),
    st.sampled_from(['{"data": NaN}', '{"data": Infinity}', '{"data": -Infinity}']),
    st.integers(300_000, 400_000).map(lambda n: json.dumps({"data": "y" * n})),
)

# Python values: each is refused by the API.
poison_values = st.one_of(
    st.integers(65, 5000).map(lambda d: {"d": nested(d)}),
    st.text(max_size=5).map(lambda s: {"s": s + "\x00"}),
    st.sampled_from(["\ud800", "\udc00"]).map(lambda s: [s]),
    st.sampled_from([float("nan"), float("inf"), float("-inf")]).map(lambda f: {"f": f}),
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(start_text=poison_texts, signal_text=poison_texts, signal_value=poison_values)
def test_poison_from_sql_and_signals_is_refused_or_dead_lettered(
    store: Store, start_text: str, signal_text: str, signal_value: Any
) -> None:
    client = Client(store, FLOWS)
    store.register_types([f.spec().workflow_type for f in FLOWS], by="test")
    before = {r.id for r in store.list_instances(limit=10_000)}
    # The SQL contract: a start row.
    refusal = ""
    try:
        sql_start(store, Takes.spec().workflow_type, start_text)
    except Exception as exc:  # refused by the trigger or the JSON parser: nothing written
        refusal = str(exc)
    assert not refusal or "wf_start" in refusal or "json" in refusal.lower()
    # The signal channel: one waiting instance gets a poison signal from SQL and from Python.
    waiting = client.start(Takes, {"data": 1})
    dependencies: dict[str, Any] = {"effects": [], "poisoned": [], "guard": threading.Lock()}
    Runner(store, FLOWS, dependencies=dependencies).run_until_idle(timeout=20)
    assert client.get(waiting).waiting is not None
    refusal = ""
    try:
        raw(
            store,
            "INSERT INTO wf_signals (instance_id, name, payload) VALUES (%s, 'go', %s)",
            (waiting, signal_text),
        )
    except Exception as exc:
        refusal = str(exc)
    assert not refusal or "wf_signals" in refusal or "json" in refusal.lower()
    with pytest.raises(InputError):
        client.signal(waiting, "go", signal_value)
    # Valid work alongside.
    good = [client.start(Effect, {}) for _ in range(2)]
    dependencies = {"effects": [], "poisoned": [], "guard": threading.Lock()}
    Runner(store, FLOWS, dependencies=dependencies).run_until_idle(timeout=20)

    assert sorted(dependencies["effects"]) == sorted(good)  # exactly once each
    for g in good:
        assert client.get(g).status == Status.COMPLETED
    # No poison instance loops: each ran its step at most once in this round, and none is
    # left leased (PENDING/RUNNING with a lease) by the runner that stopped.
    runs = dependencies["poisoned"]
    assert len(runs) == len(set(runs))
    for record in store.list_instances(limit=10_000):
        if record.id in before:
            continue
        task = store.task(record.id)
        assert task is None or task.lease_owner is None, record
    # The waiting instance took no poison: still waiting, or finished, or quarantined by a
    # signal it could not apply (never re-run endlessly).
    state = client.get(waiting)
    assert state.status in (Status.RUNNING, Status.PENDING, Status.COMPLETED, Status.STALLED)
    assert state.waiting is not None or state.status != Status.RUNNING
