"""``ctx.<name>`` in a condition reads the key ``name``, also when a dict has a method of
that name (``items``, ``keys``, ``values``, ``get``, ``count``...); calling a method
(``ctx.input.get("k")``) still calls it, and a missing key is an error, not a method."""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_wf.definition.dag_expressions import (
    EXPRESSION_ERRORS,
    compile_expression,
    evaluate,
)


def _value(text: str, ctx: dict[str, Any]) -> Any:
    return evaluate(compile_expression(text), text, ctx)


CTX: dict[str, Any] = {
    "items": 3,
    "keys": ["k"],
    "values": {"get": 7, "count": 2},
    "input": {"get": "g", "pop": 1, "copy": "c", "update": True},
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ctx.items == 3", True),
        ("ctx.items", 3),
        ('ctx["items"] == ctx.items', True),
        ("ctx.keys[0]", "k"),
        ("ctx.values.get + ctx.values.count", 9),
        ("ctx.input.get", "g"),
        ("ctx.input.pop + 1", 2),
        ("ctx.input.copy", "c"),
        ("ctx.input.update", True),
        # a call is still a call: the allowed methods work on the same dicts
        ('ctx.values.get("count")', 2),
        ('ctx.input.get("missing", 5)', 5),
        ("sorted(ctx.values.keys())", ["count", "get"]),
        ("len(ctx.items())", 4),
        ("[k for k, v in ctx.values.items() if v > 5]", ["get"]),
        ("ctx.keys.count('k')", 1),
        # attributes of what is not a dict are read as before
        ("ctx.items.real", 3),
    ],
)
def test_attribute_access_on_a_dict_reads_the_key(text: str, expected: Any) -> None:
    assert _value(text, CTX) == expected


@pytest.mark.parametrize("text", ["ctx.nothing", "ctx.values.keys == 1", "ctx.input.items"])
def test_a_missing_key_is_an_error_not_a_method(text: str) -> None:
    with pytest.raises(EXPRESSION_ERRORS) as caught:
        _value(text, CTX)
    assert text.split(".")[-1].split(" ")[0] in str(caught.value)


def test_dunder_attributes_stay_refused() -> None:
    with pytest.raises(EXPRESSION_ERRORS):
        _value("ctx.input.__class__", CTX)
    with pytest.raises(EXPRESSION_ERRORS):
        _value("ctx.__class__", {"__class__": 1})
