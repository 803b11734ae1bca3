"""Hostile DAG definitions (issue 9, items 5, 6, 7): conditions are pure and bounded,
definitions have a size and node-count limit, validation is linear in fan-out, and
``sub_workflow`` targets are an allow-list in the registry."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Awaitable
from typing import Any

import pytest

from statemachine_wf import Workflow
from statemachine_wf.dag import DagBuilder, DagDefinition, Registry, check, load
from statemachine_wf.definition import dag_expressions as expr_mod
from statemachine_wf.definition import dag_models as models
from statemachine_wf.definition.config import Config
from statemachine_wf.errors import DefinitionError, Fail
from statemachine_wf.runtime.dag_handlers import LoopState, NodeCall, NodeResult, handler_for


async def _coro(awaitable: Awaitable[NodeResult]) -> NodeResult:
    return await awaitable


# -- item 5: conditions ---------------------------------------------------------------------


def conditional(when: str) -> DagDefinition:
    b = DagBuilder("hostile")
    b.node("s", "start")
    b.node("c", "condition", branches=[{"handle": "y", "when": when}])
    b.node("e", "end", join="any")
    b.edge("s", "c")
    b.edge("c", "e", handle="y")
    b.edge("c", "e", handle="else")
    return b.build()


def run_condition(definition: DagDefinition, ctx: dict[str, Any]) -> str | None:
    graph = check(definition)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        call = NodeCall("i", graph.nodes["c"], graph.config("c"), ctx, 1, 1, Registry(), pool)
        return asyncio.run(_coro(handler_for("condition")(call))).handle


@pytest.mark.parametrize(
    "when",
    [
        "999999**1459139 > 0",  # held the interpreter 9.4 s
        "2 << 100000000 > 0",
        "len('a' * 10**9) > 0",
        "len([0] * 10**9) > 0",
        "len('%0100000000d' % 1) > 0",  # % formatting allocated 100 MB
        "len([ctx.input.s + ctx.input.s for x in ctx.input.l]) > 0",
    ],
)
def test_a_runaway_condition_fails_its_node_with_expression_limit(when: str) -> None:
    ctx = {"input": {"s": "a" * 100_000, "l": list(range(5_000))}}
    with pytest.raises(Fail) as info:
        run_condition(conditional(when), ctx)
    assert info.value.code == "expression_limit"
    assert "limit" in str(info.value) or "not allowed" in str(info.value)


@pytest.mark.parametrize(
    ("when", "says"),
    [
        ("len(ctx.input.s.ljust(10**8)) > 0", "method 'ljust' is not allowed"),
        ("len('0'.zfill(10**8)) > 0", "method 'zfill' is not allowed"),
        ("len(','.join(ctx.input.l)) > 0", "method 'join' is not allowed"),
        ("ctx.input.l.append(1) or True", "method 'append' is not allowed"),
        ("ctx.lp.items.append(1) or True", "method 'append' is not allowed"),
        ("ctx.input.d.update({}) or True", "method 'update' is not allowed"),
        ("len(f'{1:>99999999}') > 0", "format specs"),
        ("(lambda: 1) == 1", "Lambda is not allowed"),
        ("(lambda: 1)() == 1", "only named functions"),
        ("ctx.input.f[0]() == 1", "only named functions"),
        ("+".join(["1"] * 1900), "nested more than 40 levels"),
        ("-" * 3000 + "1 > 0", "nested"),
        ("[" * 150 + "]" * 150, "nested"),
        ("[" + ",".join(["1"] * 600) + "] == []", "more than 500 syntax nodes"),
        ("ctx.input.n > 1 or " * 300 + "True", "characters; the limit is 4000"),
    ],
)
def test_a_hostile_condition_is_refused_at_load(when: str, says: str) -> None:
    """Deep or huge expressions are a DefinitionError, never MemoryError/RecursionError."""
    with pytest.raises(DefinitionError) as info:
        conditional(when)
    assert says in str(info.value)


def test_a_failing_condition_does_not_copy_its_data_into_the_error() -> None:
    """A missing key of 100,000 characters: the message is cut, not the key copied."""
    ctx = {"input": {"d": {}, "s": "k" * 100_000}}
    with pytest.raises(Fail) as info:
        run_condition(conditional("ctx.input.d[ctx.input.s] == 1"), ctx)
    assert info.value.code == "bad_expression"
    assert "KeyError" in str(info.value)
    assert len(str(info.value)) < 1_000


def test_a_condition_cannot_reach_the_callers_context() -> None:
    """Regression: a condition mutated the runner's cached context (the output said 0,
    the log 1000). It evaluates on a private copy: what it returns is not the caller's."""
    ctx: dict[str, Any] = {"input": {"l": [1, 2], "d": {"k": [3]}}}
    parsed = expr_mod.compile_expression("ctx.input")
    seen = expr_mod.evaluate(parsed, "ctx.input", ctx)
    assert seen == ctx["input"]
    assert seen is not ctx["input"]
    assert seen["l"] is not ctx["input"]["l"]
    assert seen["d"]["k"] is not ctx["input"]["d"]["k"]
    seen["l"].append(99)
    assert ctx == {"input": {"l": [1, 2], "d": {"k": [3]}}}


def test_safe_methods_and_ordinary_expressions_still_work() -> None:
    ctx = {"input": {"name": " Ada ", "tags": ["a", "b"], "m": {"x": 1}, "n": 7}}
    for when in [
        "ctx.input.name.strip().lower() == 'ada'",
        "ctx.input.tags.count('a') == 1 and ctx.input.m.get('x') == 1",
        "ctx.input.n % 2 == 1 and 2 ** 10 == 1024 and 'ab' * 3 == 'ababab'",
        "sorted(ctx.input.tags)[0] == 'a' and len([t for t in ctx.input.tags]) == 2",
        "f'{ctx.input.n}' == '7'",
    ]:
        assert run_condition(conditional(when), ctx) == "y", when


def test_a_loop_body_condition_cannot_make_a_one_item_loop_run_forever() -> None:
    """Regression: ``ctx.lp.items.append(1)`` in a body condition grew the cached item
    list; the loop never ended. Refused at load now, and the loop's later iterations
    read the items from the round's first output, not from a mutable context."""
    b = DagBuilder("forever")
    b.node("s", "start")
    b.node("lp", "loop", items="{{ctx.input.items}}")
    b.node("c", "condition", branches=[{"handle": "y", "when": "ctx.lp.items.append(1) or 1"}])
    b.node("back", "python", function="f", join="any")
    b.node("e", "end")
    b.edge("s", "lp")
    b.edge("lp", "c", handle="loop")
    b.edge("c", "back", handle="y")
    b.edge("c", "back", handle="else")
    b.edge("back", "lp")
    b.edge("lp", "e", handle="done")
    with pytest.raises(DefinitionError, match="method 'append' is not allowed"):
        b.build()


def test_loop_outputs_carry_the_items_once() -> None:
    """Regression: every iteration's output repeated the whole item list and every result
    so far (about 1.5 GB of log for 10,000 items)."""
    b = DagBuilder("lp")
    b.node("s", "start")
    b.node("lp", "loop", items="{{ctx.input.items}}")
    b.node("body", "python", function="f")
    b.node("e", "end")
    b.edge("s", "lp")
    b.edge("lp", "body", handle="loop")
    b.edge("body", "lp")
    b.edge("lp", "e", handle="done")
    graph = check(b.build())
    items = list(range(3))

    def step(state: LoopState | None, run: int) -> Any:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            call = NodeCall(
                "i", graph.nodes["lp"], graph.config("lp"), {"input": {"items": items}},
                run, run, Registry(), pool, loop=state,
            )  # fmt: skip
            return asyncio.run(_coro(handler_for("loop")(call)))

    first = step(None, 1)
    assert first.output == {"item": 0, "index": 0, "items": items, "start": 1}
    second = step(LoopState(False, first.output, "r0", items=items), 2)
    assert second.output == {"item": 1, "index": 1, "result": "r0", "start": 1}
    assert "items" not in second.output
    done = step(LoopState(False, {"index": 2, "start": 1}, "r2", items, ["r0", "r1", "r2"]), 4)
    assert done.handle == "done"
    assert done.output == {"results": ["r0", "r1", "r2"], "count": 3}


# -- item 6: definition limits and linear validation -----------------------------------------


def fan(width: int) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = [{"id": "s", "type": "start"}, {"id": "e", "type": "end"}]
    nodes += [{"id": f"b{i}", "type": "python", "config": {"function": "f"}} for i in range(width)]
    edges = [{"source": "s", "target": f"b{i}"} for i in range(width)]
    edges += [{"source": f"b{i}", "target": "e"} for i in range(width)]
    return {"name": "fan", "nodes": nodes, "edges": edges}


def test_a_100k_node_definition_is_refused_naming_the_limit_and_setting() -> None:
    with pytest.raises(DefinitionError) as info:
        load(fan(100_000))
    text = str(info.value)
    assert "100002 nodes; the limit is 10000 (SWF_MAX_DAG_NODES)" in text


def test_a_10mb_definition_is_refused_before_it_is_parsed() -> None:
    raw = fan(2)
    raw["description"] = "x" * 10_000_000
    with pytest.raises(DefinitionError, match=r"bytes; the limit is 2097152 bytes \(SWF_MAX"):
        load(json.dumps(raw))
    with pytest.raises(DefinitionError, match="SWF_MAX_DAG_BYTES"):
        load(raw)


def test_definition_limits_are_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWF_MAX_DAG_NODES", "5")
    with pytest.raises(DefinitionError, match=r"it has 6 nodes; the limit is 5"):
        load(fan(4))
    b = DagBuilder("built")
    b.node("s", "start")
    for i in range(5):
        b.node(f"n{i}", "python", function="f")
    b.node("e", "end")
    b.chain("s", *(f"n{i}" for i in range(5)), "e")
    with pytest.raises(DefinitionError, match="SWF_MAX_DAG_NODES"):
        b.build()
    load(fan(3))  # at the limit: fine
    monkeypatch.setenv("SWF_MAX_DAG_BYTES", "100")
    with pytest.raises(DefinitionError, match=r"the limit is 100 bytes \(SWF_MAX_DAG_BYTES\)"):
        load(fan(1))
    env = {"SWF_MAX_DAG_BYTES": "4096", "SWF_MAX_DAG_NODES": "50"}
    config = Config.from_env(env)
    assert (config.max_dag_bytes, config.max_dag_nodes) == (4096, 50)
    assert (Config().max_dag_bytes, Config().max_dag_nodes) == (2 * 1024 * 1024, 10_000)
    with pytest.raises(ValueError, match="SWF_MAX_DAG_NODES must be an integer"):
        Config.from_env({"SWF_MAX_DAG_NODES": "many"})


def test_validation_is_linear_in_fan_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the cycle check listed a node's edges again on every visit (7.5 s at
    4,000 branches). Counted, not timed: edge-key computations per edge stay constant."""
    counts = []
    real = models._key
    for width in (500, 2_000):
        calls = 0

        def counting(edge: models.Edge) -> tuple[str, str, str | None]:
            nonlocal calls
            calls += 1
            return real(edge)

        monkeypatch.setattr(models, "_key", counting)
        definition = DagDefinition.model_validate(fan(width))
        check(definition)
        counts.append(calls / (2 * width))
    assert counts[1] <= counts[0] * 1.1  # per edge: the same at 4x the fan-out
    assert counts[1] < 10


def test_a_20000_branch_definition_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWF_MAX_DAG_NODES", "30000")
    monkeypatch.setenv("SWF_MAX_DAG_BYTES", str(50 * 1024 * 1024))
    graph = check(load(fan(20_000)))
    assert len(graph.outgoing["s"]) == 20_000


# -- item 7: sub_workflow allow-list ---------------------------------------------------------


def sub(target: str) -> DagDefinition:
    b = DagBuilder("nested")
    b.node("s", "start")
    b.node("sub", "sub_workflow", workflow=target, input={"amount": 424242})
    b.node("e", "end")
    b.chain("s", "sub", "e")
    return b.build()


def test_the_registry_refuses_a_sub_workflow_target_it_does_not_allow() -> None:
    registry = Registry()
    with pytest.raises(DefinitionError) as info:
        registry.check_definition(sub("payments.pay.v1"))
    assert "node 'sub': sub_workflow target 'payments.pay.v1' is not allowed" in str(info.value)
    registry.allow_workflow("payments.pay.v1")
    registry.check_definition(sub("payments.pay.v1"))  # allowed now
    assert registry.workflow_targets == {"payments.pay.v1"}


def test_a_hosted_workflow_is_not_a_target_unless_allowed() -> None:
    """Regression: ``get_workflow`` fell back to every workflow the runner hosts."""
    registry = Registry()
    hosted: dict[str, type[Workflow[Any, Any]]] = {"payments.pay.v1": Workflow}
    with pytest.raises(Fail) as info:
        registry.get_workflow("payments.pay.v1", hosted)
    assert info.value.code == "workflow_not_allowed"
    registry.allow_workflow("payments.pay.v1")
    assert registry.get_workflow("payments.pay.v1", hosted) is Workflow
