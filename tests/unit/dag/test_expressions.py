"""Condition expressions: parsed and checked once when a definition is loaded, evaluated
from many threads at once, and exclusive-branch joins refused at load time."""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import threading
from typing import Any

import pytest

from statemachine_wf.dag import DagBuilder, DagDefinition, Registry, check, load
from statemachine_wf.definition import dag_expressions as expr_mod
from statemachine_wf.definition.dag_models import ConditionConfig
from statemachine_wf.errors import DefinitionError, Fail
from statemachine_wf.runtime.dag_handlers import InternalError, NodeCall, NodeResult, handler_for

BRANCHES = [
    {
        "handle": "big",
        "when": "ctx.input.n > 100 and (len(ctx.input.tags) > 0 or ctx.input.n * 2 > 400)",
    },
    {"handle": "mid", "when": "ctx.input.n > 10 and max(ctx.input.tags or [0]) < 5"},
    {"handle": "odd", "when": "any(t % 2 for t in ctx.input.tags) and sum(ctx.input.tags) < 100"},
]


def conditional(branches: list[dict[str, str]] = BRANCHES) -> DagDefinition:
    b = DagBuilder("conditional")
    b.node("s", "start")
    b.node("c", "condition", branches=branches)
    b.node("e", "end", join="any")
    b.edge("s", "c")
    for handle in [br["handle"] for br in branches] + ["else"]:
        b.edge("c", "e", handle=handle)
    return b.build()


def call(
    definition: DagDefinition, data: dict[str, Any], pool: concurrent.futures.Executor
) -> NodeCall:
    graph = check(definition)
    return NodeCall(
        instance_id="i",
        node=graph.nodes["c"],
        config=graph.config("c"),
        ctx={"input": data},
        run=1,
        attempt=1,
        registry=Registry(),
        pool=pool,
    )


def expected(n: int, tags: list[int]) -> str:
    if n > 100 and (len(tags) > 0 or n * 2 > 400):
        return "big"
    if n > 10 and max(tags or [0]) < 5:
        return "mid"
    if any(t % 2 for t in tags) and sum(tags) < 100:
        return "odd"
    return "else"


def test_conditions_evaluate_concurrently_from_many_threads() -> None:
    """Regression: simpleeval parsed on every evaluation and CPython 3.11's parser is not
    thread-safe (SystemError: AST constructor recursion depth mismatch)."""
    definition = conditional()
    errors: list[BaseException] = []
    wrong: list[tuple[int, str]] = []
    barrier = threading.Barrier(8)

    def work(seed: int) -> None:
        loop = asyncio.new_event_loop()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            barrier.wait()
            try:
                for i in range(400):
                    n, tags = (seed * 37 + i * 13) % 300, [i % 7, seed % 3]
                    res: NodeResult = loop.run_until_complete(
                        handler_for("condition")(call(definition, {"n": n, "tags": tags}, pool))
                    )
                    if res.handle != expected(n, tags):
                        wrong.append((n, str(res.handle)))
            except BaseException as exc:
                errors.append(exc)
            finally:
                loop.close()

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert wrong == []


def test_a_condition_is_never_parsed_at_run_time(monkeypatch: pytest.MonkeyPatch) -> None:
    definition = conditional()
    parses: list[str] = []
    real_parse = ast.parse

    def counting_parse(source: Any, *args: Any, **kwargs: Any) -> Any:
        parses.append(str(source))
        return real_parse(source, *args, **kwargs)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        node_call = call(definition, {"n": 500, "tags": []}, pool)
        monkeypatch.setattr(ast, "parse", counting_parse)
        res = asyncio.run(handler_for("condition")(node_call))
        monkeypatch.undo()
    assert parses == []
    assert res.handle == "big"


def test_an_expression_failing_on_its_data_fails_the_node_without_retry() -> None:
    definition = conditional([{"handle": "x", "when": "ctx.input.n / 0 > 1"}])
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        pytest.raises(Fail, match="ZeroDivisionError") as info,
    ):
        asyncio.run(handler_for("condition")(call(definition, {"n": 1}, pool)))
    assert info.value.code == "bad_expression"


def test_an_internal_error_of_the_evaluator_is_internal(monkeypatch: pytest.MonkeyPatch) -> None:
    definition = conditional()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise SystemError("AST constructor recursion depth mismatch")

    monkeypatch.setattr("statemachine_wf.runtime.dag_handlers.evaluate", broken)
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        pytest.raises(InternalError, match="SystemError"),
    ):
        asyncio.run(handler_for("condition")(call(definition, {"n": 1, "tags": []}, pool)))


def problems(definition: dict[str, Any]) -> list[str]:
    with pytest.raises(DefinitionError) as info:
        load(definition)
    return info.value.problems


def one_condition(when: str) -> dict[str, Any]:
    return {
        "name": "t",
        "nodes": [
            {"id": "s", "type": "start"},
            {
                "id": "c",
                "type": "condition",
                "config": {"branches": [{"handle": "y", "when": when}]},
            },
            {"id": "e", "type": "end", "joinMode": "any"},
        ],
        "edges": [
            {"source": "s", "target": "c"},
            {"source": "c", "target": "e", "sourceHandle": "y"},
            {"source": "c", "target": "e", "sourceHandle": "else"},
        ],
    }


def test_a_template_in_when_is_a_definition_error() -> None:
    """Regression: accepted when saved, then `unhashable type: 'set'` at run time."""
    [problem] = problems(one_condition("{{ctx.input.amount}} > 100"))
    assert "node 'c'" in problem
    assert "templates are not used in a condition" in problem
    assert "ctx.input.amount > 100" in problem


@pytest.mark.parametrize(
    ("when", "name"),
    [("amount > 100", "amount"), ("input.n > 1", "input"), ("floor(ctx.n) > 1", "floor")],
)
def test_an_unknown_name_is_a_definition_error(when: str, name: str) -> None:
    [problem] = problems(one_condition(when))
    assert f"unknown name(s) [{name!r}]" in problem
    assert "node 'c'" in problem


@pytest.mark.parametrize(
    "when",
    [
        "ctx.input.amount > 100",
        "len(ctx.input.tags) > 0 and True",
        "any(t > 2 for t in ctx.input.tags)",
        "{k: v for k, v in ctx.input.items()} != {}",
        "ctx.input.get('x') is None",
    ],
)
def test_valid_expressions_load(when: str) -> None:
    d = load(one_condition(when))
    config = check(d).config("c")
    assert isinstance(config, ConditionConfig)
    assert config.branches[0].parsed is not None


def test_the_evaluator_sees_ctx_and_the_safe_functions() -> None:
    parsed = expr_mod.compile_expression("sorted(ctx.xs)[0] + abs(ctx.y) + round(1.4)")
    assert expr_mod.evaluate(parsed, "", {"xs": [3, 2], "y": -1}) == 4


# -- all-joins behind exclusive branches --------------------------------------------------


def branches_into(join: str, *, handles: tuple[str, str] = ("big", "else")) -> dict[str, Any]:
    return {
        "name": "t",
        "nodes": [
            {"id": "s", "type": "start"},
            {
                "id": "c",
                "type": "condition",
                "config": {"branches": [{"handle": "big", "when": "ctx.input.n > 1"}]},
            },
            {"id": "a", "type": "python", "config": {"function": "f"}},
            {"id": "b", "type": "python", "config": {"function": "f"}},
            {"id": "j", "type": "python", "joinMode": join, "config": {"function": "f"}},
            {"id": "e", "type": "end"},
        ],
        "edges": [
            {"source": "s", "target": "c"},
            {"source": "c", "target": "a", "sourceHandle": handles[0]},
            {"source": "c", "target": "b", "sourceHandle": handles[1]},
            {"source": "a", "target": "j"},
            {"source": "b", "target": "j"},
            {"source": "j", "target": "e"},
        ],
    }


def test_an_all_join_behind_exclusive_branches_is_refused() -> None:
    """Regression: accepted, then `dead_end` at run time."""
    [problem] = problems(branches_into("all"))
    assert problem.startswith("node 'j': an 'all' join that can never fire")
    assert "condition 'c'" in problem
    assert "'big'" in problem
    assert "'else'" in problem
    assert "join 'any'" in problem


def test_an_any_join_behind_exclusive_branches_loads() -> None:
    load(branches_into("any"))


def test_an_all_join_behind_one_branch_loads() -> None:
    load(branches_into("all", handles=("big", "big")))


def test_an_all_join_after_the_branches_met_again_loads() -> None:
    """s -> c -> {a (big), b (else)} -> m (any) -> j (all) <- s: j fires (m ran either way)."""
    b = DagBuilder("met_again")
    b.node("s", "start")
    b.node("c", "condition", branches=[{"handle": "big", "when": "ctx.input.n > 1"}])
    b.node("a", "python", function="f")
    b.node("b", "python", function="f")
    b.node("m", "python", function="f", join="any")
    b.node("k", "python", function="f")
    b.node("j", "python", function="f")
    b.node("e", "end")
    b.edge("s", "c")
    b.edge("c", "a", handle="big")
    b.edge("c", "b", handle="else")
    b.chain("a", "m", "j", "e")
    b.chain("b", "m")
    b.chain("s", "k", "j")
    b.build()  # no DefinitionError


def test_a_condition_inside_a_loop_may_feed_a_join_after_the_loop() -> None:
    """Different iterations may take different branches: not refused."""
    b = DagBuilder("loop_branches")
    b.node("s", "start")
    b.node("lp", "loop", items="{{ctx.input.items}}")
    b.node("c", "condition", branches=[{"handle": "big", "when": "ctx.lp.item > 1"}])
    b.node("a", "python", function="f")
    b.node("b", "python", function="f")
    b.node("back", "python", function="f", join="any")
    b.node("j", "python", function="f")
    b.node("e", "end")
    b.edge("s", "lp")
    b.edge("lp", "c", handle="loop")
    b.edge("c", "a", handle="big")
    b.edge("c", "b", handle="else")
    b.chain("a", "back")
    b.chain("b", "back")
    b.edge("back", "lp")
    b.edge("lp", "j", handle="done")
    b.edge("a", "j")
    b.chain("j", "e")
    b.build()


def test_exclusive_branches_inside_one_loop_body_are_refused() -> None:
    b = DagBuilder("loop_join")
    b.node("s", "start")
    b.node("lp", "loop", items="{{ctx.input.items}}")
    b.node("c", "condition", branches=[{"handle": "big", "when": "ctx.lp.item > 1"}])
    b.node("a", "python", function="f")
    b.node("b", "python", function="f")
    b.node("j", "python", function="f")
    b.node("e", "end")
    b.edge("s", "lp")
    b.edge("lp", "c", handle="loop")
    b.edge("c", "a", handle="big")
    b.edge("c", "b", handle="else")
    b.chain("a", "j", "lp")
    b.chain("b", "j")
    b.edge("lp", "e", handle="done")
    with pytest.raises(DefinitionError, match="node 'j': an 'all' join that can never fire"):
        b.build()


@pytest.mark.parametrize("text", ["rand() > 0.5", "randint(2) == 1"])
def test_a_condition_may_not_draw_random_numbers(text: str) -> None:
    """A condition decides a branch in the pure interpreter: the same log must always
    dispatch the same way, so simpleeval's rand and randint are not among its names."""
    with pytest.raises(expr_mod.ExpressionProblem, match="rand"):
        expr_mod.compile_expression(text)
    assert expr_mod.evaluate(expr_mod.compile_expression("int('3') + 1"), "", {}) == 4
