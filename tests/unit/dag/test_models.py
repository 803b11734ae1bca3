"""DAG definitions: loading from JSON, building in Python, and validation listing every problem."""

from __future__ import annotations

import json
from typing import Any

import pytest

from statemachine_wf.dag import DagBuilder, DagDefinition, check, load
from statemachine_wf.definition.dag_templates import TemplateError, resolve
from statemachine_wf.errors import DefinitionError


def _def(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": "t", "nodes": nodes, "edges": edges}


START = {"id": "s", "type": "start"}
END = {"id": "e", "type": "end"}


def fn(node_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "python", "config": {"function": "f"}, **extra}


def cond(node_id: str, handle: str, when: str) -> dict[str, Any]:
    return {
        "id": node_id,
        "type": "condition",
        "config": {"branches": [{"handle": handle, "when": when}]},
    }


def problems(data: Any) -> list[str]:
    with pytest.raises(DefinitionError) as info:
        load(data)
    return info.value.problems


def test_editor_json_loads_with_camel_case_keys() -> None:
    text = json.dumps(
        {
            "name": "orders",
            "nodes": [
                {"id": "s", "type": "start", "position": {"x": 1, "y": 2}},
                fn("a", outputVariable="order", errorHandling="continue"),
                {"id": "j", "type": "end", "joinMode": "any"},
            ],
            "edges": [
                {"source": "s", "target": "a"},
                {"source": "a", "target": "j"},
                {"source": "a", "target": "j", "sourceHandle": "error"},
            ],
        }
    )
    d = load(text)
    assert d.nodes[1].output_variable == "order"
    assert d.nodes[1].error_handling == "continue"
    assert d.nodes[2].join == "any"
    assert d.edges[2].source_handle == "error"
    # The stored form round-trips.
    assert load(d.dump()) == d


def test_python_builder_matches_json() -> None:
    b = DagBuilder("t")
    b.node("s", "start")
    b.node("a", "python", function="f")
    b.node("e", "end")
    b.chain("s", "a", "e")
    built = b.build()
    loaded = load(
        _def(
            [START, fn("a"), END], [{"source": "s", "target": "a"}, {"source": "a", "target": "e"}]
        )
    )
    assert built == loaded


def test_every_problem_is_listed_at_once() -> None:
    found = problems(
        _def(
            [
                {"id": "x", "type": "javascript"},
                {"id": "p", "type": "python", "config": {}},
                {
                    "id": "c",
                    "type": "condition",
                    "config": {"branches": [{"handle": "y", "when": "ctx.n >"}]},
                },
            ],
            [{"source": "x", "target": "nowhere"}],
        )
    )
    text = "\n".join(found)
    assert "unknown type 'javascript'" in text
    assert "config.function: Field required" in text
    assert "bad expression 'ctx.n >'" in text
    assert "no start node" in text
    assert "no end node" in text
    assert "unknown node(s) ['nowhere']" in text
    assert len(found) == 6


def test_handles_a_node_cannot_produce() -> None:
    found = problems(
        _def(
            [
                START,
                fn("a"),
                {
                    "id": "c",
                    "type": "condition",
                    "config": {"branches": [{"handle": "big", "when": "1"}]},
                },
                END,
            ],
            [
                {"source": "s", "target": "a"},
                {"source": "a", "target": "c", "sourceHandle": "error"},
                {"source": "c", "target": "e", "sourceHandle": "small"},
                {"source": "c", "target": "e"},
            ],
        )
    )
    assert any("python node 'a' cannot produce handle 'error'" in p for p in found)
    assert any("cannot produce handle 'small'" in p for p in found)
    assert any("cannot produce handle None" in p for p in found)


def test_a_cycle_is_refused_unless_a_loop_makes_it() -> None:
    edges = [
        {"source": "s", "target": "a"},
        {"source": "a", "target": "b"},
        {"source": "b", "target": "a"},
        {"source": "b", "target": "e"},
    ]
    found = problems(_def([START, fn("a"), fn("b"), END], edges))
    assert found == ["cycle not made by a loop node: a -> b -> a"]

    loop = {"id": "l", "type": "loop", "config": {"items": "{{ctx.input.items}}"}}
    ok = _def(
        [START, loop, fn("body"), END],
        [
            {"source": "s", "target": "l"},
            {"source": "l", "target": "body", "sourceHandle": "loop"},
            {"source": "body", "target": "l"},
            {"source": "l", "target": "e", "sourceHandle": "done"},
        ],
    )
    graph = check(load(ok))
    assert graph.bodies["l"] == frozenset({"body"})
    assert graph.scope["body"] == "l"
    assert graph.scope["e"] is None


def test_structure_problems() -> None:
    found = problems(
        _def(
            [START, {"id": "s2", "type": "start"}, fn("a"), fn("a"), fn("lonely"), END],
            [
                {"source": "s", "target": "a"},
                {"source": "a", "target": "e"},
                {"source": "e", "target": "a"},
                {"source": "a", "target": "s"},
                {"source": "a", "target": "a"},
            ],
        )
    )
    text = "\n".join(found)
    assert "node 'a': duplicate id" in text
    assert "more than one start node" in text
    assert "an end node cannot have outgoing edges" in text
    assert "the start node cannot have incoming edges" in text
    assert "a node cannot feed itself" in text


def test_unreachable_nodes_and_bad_fields() -> None:
    found = problems(_def([START, fn("a"), END], [{"source": "s", "target": "e"}]))
    assert found == ["nodes the start cannot reach: ['a']"]
    found = problems({"name": "t", "nodes": [{"id": "s", "type": "start", "joinMode": "some"}]})
    assert any("['s'].joinMode" in p or "['s'].join" in p for p in found)


def test_definition_model_is_frozen() -> None:
    d = DagDefinition(name="t", nodes=[], edges=[])
    with pytest.raises(ValueError, match="frozen"):
        d.name = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ctx.input.id}}", 7),
        ("{{ ctx.input.items }}", [1, {"a": 2}]),
        ("{{ctx.input.items.1.a}}", 2),
        ("id_{{ctx.input.id}}", "id_7"),
        ("{{ctx.input.id}}{{ctx.input.id}}", "77"),
        ("list={{ctx.input.items}}", 'list=[1,{"a":2}]'),
        ({"nested": ["{{ctx.input.id}}", "plain"]}, {"nested": [7, "plain"]}),
        (3, 3),
    ],
)
def test_templates_keep_the_type_of_a_single_expression(template: Any, expected: Any) -> None:
    ctx = {"input": {"id": 7, "items": [1, {"a": 2}]}}
    assert resolve(template, ctx) == expected


def test_a_missing_template_path_names_it() -> None:
    with pytest.raises(TemplateError, match=r"ctx\.input\.idx.*no key 'idx' in ctx\.input"):
        resolve("{{ctx.input.idx}}", {"input": {"id": 1}})
    with pytest.raises(TemplateError, match="no index '5'"):
        resolve("{{ctx.items.5}}", {"items": [1]})
    with pytest.raises(TemplateError, match="must start with 'ctx'"):
        resolve("{{input.id}}", {"input": {}})
