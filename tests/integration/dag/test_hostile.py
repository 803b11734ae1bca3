"""Hostile DAG definitions against a real runner and both stores (issue 9, items 5-7):
a runaway condition, an oversized node output, a loop's log, a sub_workflow target the
registry does not allow, and random hostile definitions run beside a valid one."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine_wf import COMPLETED, Runner, RunnerOptions, StepContext, Store, Workflow, step
from statemachine_wf.dag import DagBuilder, DagClient, DagDefinition
from statemachine_wf.definition.events import Ev, Status
from statemachine_wf.errors import DefinitionError

from ..core.test_poison import raw
from ..crash.harness import poll_until
from . import helpers as h

# -- a hosted workflow the DAG registry does not allow -------------------------------------

paid: list[int] = []
_paid_lock = threading.Lock()


class PayInput(BaseModel):
    amount: int


class PayProgress(BaseModel):
    done: bool = False


class Pay(Workflow[PayInput, PayProgress]):
    workflow_type = "dagtest.payments.pay.v1"

    @step(initial=True, to=COMPLETED)
    def go(self, ctx: StepContext[PayInput, PayProgress]) -> None:
        with _paid_lock:
            paid.append(ctx.input.amount)
        ctx.set(done=True)


@contextmanager
def running(store: Store) -> Iterator[Runner]:
    """A runner hosting the payments workflow beside the DAG helpers' registry."""
    runner = Runner(
        store,
        [h.Child, Pay],
        dags=h.registry,
        options=RunnerOptions(concurrency=4, lease=30.0, idle_poll=0.2),
    )
    runner.start()
    try:
        yield runner
    finally:
        runner.stop(timeout=10)


def node_outputs(client: DagClient, iid: str, node: str) -> list[Any]:
    return [
        e.payload.get("output")
        for e in client.history(iid)
        if e.event_type == Ev.NODE_COMPLETED and e.node == node
    ]


# -- item 5 -----------------------------------------------------------------------------------


def condition_dag(when: str, name: str = "runaway") -> DagDefinition:
    b = DagBuilder(name)
    b.node("s", "start")
    b.node("c", "condition", branches=[{"handle": "y", "when": when}])
    b.node("e", "end", join="any")
    b.edge("s", "c")
    b.edge("c", "e", handle="y")
    b.edge("c", "e", handle="else")
    return b.build()


def test_a_runaway_condition_fails_its_instance_and_the_runner_goes_on(store: Store) -> None:
    """Regression: ``999999**1459139`` held the interpreter for 9.4 s against a 2 s lease."""
    client = DagClient(store)
    with running(store):
        bad = client.start(condition_dag("999999**1459139 > 0"), {})
        good = client.start(h.linear(2), {"x": 1})
        record = client.wait(bad, timeout=30)
        assert client.wait(good, timeout=30).status == Status.COMPLETED
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error["code"] == "expression_limit"
    assert "limit is 10000" in record.error["message"]
    retrying = [e for e in client.history(bad) if e.event_type == Ev.NODE_RETRYING]
    assert retrying == []  # the expression's fault: not retried


# -- item 6 -----------------------------------------------------------------------------------


def test_a_node_output_over_the_limit_fails_the_node_and_is_never_written(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWF_MAX_PAYLOAD_BYTES", "2000")
    client = DagClient(store)
    b = DagBuilder("big_output")
    b.node("s", "start")
    h.py(b, "big", "tag", name="{{ctx.input.pad}}{{ctx.input.pad}}")  # a template doubles it
    b.node("e", "end")
    b.chain("s", "big", "e")
    with running(store):
        iid = client.start(b.build(), {"pad": "p" * 1500})
        record = client.wait(iid, timeout=30)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error["code"] == "PayloadTooLarge"
    assert "node 'big' output is 3002 bytes; the limit is 2000 bytes" in record.error["message"]
    assert node_outputs(client, iid, "big") == []  # never written
    logged = "".join(json.dumps(e.payload) for e in client.history(iid))
    assert "p" * 3000 not in logged


def test_a_loop_logs_its_items_once(store: Store) -> None:
    """Regression: every iteration logged the whole item list (and every result so far)."""
    client = DagClient(store)
    items = [f"item-{i:03d}" for i in range(40)]
    b = DagBuilder("loop_log")
    b.node("s", "start")
    b.node("each", "loop", items="{{ctx.input.items}}")
    h.py(b, "body", "tag", name="{{ctx.each.item}}")
    b.node("e", "end", outputs={"results": "{{ctx.each.results}}", "n": "{{ctx.each.count}}"})
    b.edge("s", "each")
    b.edge("each", "body", handle="loop")
    b.edge("body", "each")
    b.edge("each", "e", handle="done")
    with running(store):
        iid = client.start(b.build(), {"items": items})
        assert client.wait(iid, timeout=60).status == Status.COMPLETED
    assert client.output(iid) == {"results": items, "n": 40}
    outputs = node_outputs(client, iid, "each")
    assert len(outputs) == 41
    assert sum(1 for out in outputs if "items" in out) == 1  # the list, once
    assert sum(1 for out in outputs if "results" in out) == 1  # the results, once: at done
    logged = "".join(json.dumps(out) for out in outputs)
    for item in items:  # each item: in the list once, as its iteration's item, as a result
        assert logged.count(f'"{item}"') <= 4


def test_save_refuses_a_definition_over_the_limits_and_stores_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = DagClient(store)
    monkeypatch.setenv("SWF_MAX_DAG_NODES", "4")
    with pytest.raises(DefinitionError, match=r"5 nodes; the limit is 4 \(SWF_MAX_DAG_NODES\)"):
        client.save(h.linear(3).dump())
    with pytest.raises(DefinitionError, match="SWF_MAX_DAG_NODES"):
        client.test_run(h.linear(3).dump(), {"x": 1})
    monkeypatch.setenv("SWF_MAX_DAG_BYTES", "300")
    with pytest.raises(DefinitionError, match=r"the limit is 300 bytes \(SWF_MAX_DAG_BYTES\)"):
        client.save(json.dumps(h.linear(1).dump()))
    assert client.definitions() == []
    assert store.list_instances(limit=10) == []


# -- item 7 -----------------------------------------------------------------------------------


def pay_dag() -> DagDefinition:
    b = DagBuilder("steal")
    b.node("s", "start")
    b.node("pay", "sub_workflow", workflow=Pay.workflow_type, input={"amount": 424242})
    b.node("e", "end")
    b.chain("s", "pay", "e")
    return b.build()


def test_a_sub_workflow_cannot_start_a_hosted_workflow_the_registry_does_not_allow(
    store: Store,
) -> None:
    """Regression: a DAG started a payments workflow with ``amount=424242``."""
    paid.clear()
    client = DagClient(store)
    with running(store):
        iid = client.start(pay_dag(), {})
        record = client.wait(iid, timeout=30)
        good = client.start(h.sub_workflow(), h.child_input(3))  # an allowed target runs
        assert client.wait(good, timeout=30).status == Status.COMPLETED
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error["code"] == "workflow_not_allowed"
    assert (
        "'dagtest.payments.pay.v1' is not allowed by the DAG registry" in (record.error["message"])
    )
    assert store.children(iid) == []  # no child was created
    assert paid == []


def test_a_client_that_knows_the_registry_refuses_the_target_at_save_and_start(
    store: Store,
) -> None:
    client = DagClient(store, registry=h.registry)
    for attempt in (
        lambda: client.save(pay_dag()),
        lambda: client.start(pay_dag(), {}),
        lambda: client.test_run(pay_dag(), {}),
    ):
        with pytest.raises(DefinitionError, match="node 'pay': sub_workflow target"):
            attempt()
    assert client.definitions() == []
    assert store.list_instances(limit=10) == []
    DagClient(store).save(pay_dag())  # saved by a client that cannot know ...
    with pytest.raises(DefinitionError, match="not allowed by the DAG registry"):
        client.start("steal", {})  # ... refused when started by one that does
    assert store.list_instances(limit=10) == []
    client.save(h.sub_workflow())  # an allowed target is fine


# -- the DAG-definition input channel: random hostile definitions ---------------------------

ATOMS = [
    "ctx.input.n", "ctx.input.s", "ctx.input.l", "ctx.input", "ctx", "999999", "10**9",
    "'x'", "[1, 2]", "{}", "None", "ctx.missing", "ctx.input.l[5]",
]  # fmt: skip
BINOPS = ["+", "*", "**", "%", "<<", "-", "/", "//", " and ", " or ", " > ", " == ", " in "]
CALLS = [
    "len({})", "sorted({})", "str({})", "int({})", "sum({})", "{}.ljust(10**8)",
    "{}.zfill(99999999)", "{}.append(1)", "{}.get('n')", "{}.upper()", "{}.keys()",
    "[x for x in {}]", "f'{{{}:>999999}}'", "({})", "-{}", "not {}", "{}.__class__",
]  # fmt: skip


@st.composite
def hostile_expressions(draw: st.DrawFn) -> str:
    expr = draw(st.sampled_from(ATOMS))
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            expr = f"{expr}{draw(st.sampled_from(BINOPS))}{draw(st.sampled_from(ATOMS))}"
        else:
            expr = draw(st.sampled_from(CALLS)).format(expr)
    if draw(st.booleans()):
        expr = draw(st.sampled_from(["(" * 60 + "{}" + ")" * 60, "-" * 90 + "{}", "{}"])).format(
            expr
        )
    return expr


@st.composite
def hostile_definitions(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["condition", "sub_workflow", "loop", "output", "raw"]))
    if kind == "condition":
        b = DagBuilder("hostile")
        b.node("s", "start")
        b.node("c", "condition", branches=[{"handle": "y", "when": draw(hostile_expressions())}])
        b.node("e", "end", join="any")
        b.edge("s", "c")
        b.edge("c", "e", handle="y")
        b.edge("c", "e", handle="else")
        return _loose(b)
    if kind == "sub_workflow":
        target = draw(st.sampled_from([Pay.workflow_type, "nope.v1", h.Child.workflow_type]))
        d = pay_dag().dump()
        d["nodes"][1]["config"] = {"workflow": target, "input": {"amount": 1, "n": 1}}
        return d
    if kind == "loop":
        b = DagBuilder("hostile_loop")
        b.node("s", "start")
        b.node("each", "loop", items=draw(st.sampled_from(["{{ctx.input.l}}", "{{ctx.input}}"])))
        b.node("c", "condition", branches=[{"handle": "y", "when": draw(hostile_expressions())}])
        b.node("back", "python", function="tag", args={"name": "x"}, join="any")
        b.node("e", "end")
        b.edge("s", "each")
        b.edge("each", "c", handle="loop")
        b.edge("c", "back", handle="y")
        b.edge("c", "back", handle="else")
        b.edge("back", "each")
        b.edge("each", "e", handle="done")
        return _loose(b)
    if kind == "output":
        b = DagBuilder("hostile_output")
        b.node("s", "start")
        times = draw(st.integers(1, 400))
        h.py(b, "big", "tag", name="{{ctx.input.s}}" * times)
        b.node("e", "end")
        b.chain("s", "big", "e")
        return _loose(b)
    width = draw(st.sampled_from([0, 5, 20_000]))
    return {
        "name": "raw",
        "nodes": [{"id": f"n{i}", "type": "python"} for i in range(width)],
        "edges": draw(st.lists(st.fixed_dictionaries({"source": st.text(max_size=3)}))),
    }


def _loose(b: DagBuilder) -> dict[str, Any]:
    """The builder's definition unchecked (``load`` decides)."""
    return DagDefinition(name=b.name, nodes=b._nodes, edges=b._edges).dump()


NODE_CODES = {
    "expression_limit", "bad_expression", "workflow_not_allowed", "unknown_workflow",
    "PayloadTooLarge", "bad_items", "ValidationError", "TemplateError",
}  # fmt: skip


def test_random_hostile_definitions_are_refused_or_fail_only_their_node(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWF_MAX_PAYLOAD_BYTES", "20000")
    paid.clear()
    client = DagClient(store)
    data = {"n": 3, "s": "s" * 200, "l": list(range(20))}
    with running(store):

        @settings(
            max_examples=40,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(hostile_definitions())
        def one(raw: Any) -> None:
            try:
                hostile = client.test_run(raw, data)
            except DefinitionError:
                return  # refused at load: nothing written
            key = f"valid-{uuid.uuid4()}"
            valid = client.start(h.linear(2), {"x": 1})
            counted = client.start(h.diamond(key=key), {"x": 1})
            record = client.wait(hostile, timeout=60)
            assert record.status in (Status.COMPLETED, Status.FAILED), record
            if record.status == Status.FAILED:
                assert record.error is not None
                assert record.error["code"] in NODE_CODES, record.error
            assert client.wait(valid, timeout=60).status == Status.COMPLETED
            assert client.wait(counted, timeout=60).status == Status.COMPLETED
            side_effects = {k: v for k, v in h.calls.items() if k.startswith(f"{key}:")}
            assert side_effects
            assert set(side_effects.values()) == {1}  # each exactly once
            client.stop_test_run(hostile)

        one()
    assert paid == []


def test_an_old_definition_the_new_condition_rules_refuse_is_set_aside_by_name(
    store: Store,
) -> None:
    """A run started before a rule existed (here: ``ljust`` in a condition) fails alone.

    Its definition sits in its own first event, so the rule meets it only when a runner
    reads the instance: that instance is set aside with a dead letter naming the problem,
    and the runner goes on with the rest.
    """
    client = DagClient(store)
    old = client.start(condition_dag("ctx['input']['x'] == 1", name="old-rules"), {"x": 1})
    created = client.history(old)[0]
    assert created.event_type == Ev.CREATED
    dag = created.payload["dag"]
    for node in dag["nodes"]:
        for branch in node.get("config", {}).get("branches", []):
            branch["when"] = "'a'.ljust(9) == 'a'"  # refused since issue 9
    payload = json.dumps({**created.payload, "dag": dag})
    raw(store, "UPDATE wf_events SET payload = %s WHERE seq = %s", (payload, created.seq))

    with running(store):
        good = client.start(h.linear(2), {"x": 1})
        assert client.wait(good, timeout=30).status == Status.COMPLETED
        poll_until(lambda: client.get(old).status != Status.RUNNING, timeout=30, what="old")
    record = client.get(old)
    assert record.status in (Status.STALLED, Status.FAILED)
    assert record.error is not None
    assert "ljust" in record.error["message"]
    [letter] = [d for d in DagClient(store).store.dead_letters() if d["instance_id"] == old]
    assert "ljust" in letter["reason"]
