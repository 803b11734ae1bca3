"""A list index in a template path is an ASCII integer; anything else that looks like
one ("²", "--1", an Arabic-Indic digit, a 5,000-digit number) is a TemplateError naming
the path, never a ValueError out of int() nor another index."""

from __future__ import annotations

import pytest

from statemachine_wf.definition.dag_templates import TemplateError, lookup, resolve

CTX = {"items": ["a", "b", "c"]}


@pytest.mark.parametrize(
    "part", ["²", "--1", "-²", "\u0663", "\u0661", "1_0", "+1", " 1", "9" * 5000, "", "3", "-4"]
)
def test_a_bad_index_is_a_template_error(part: str) -> None:
    path = f"ctx.items.{part}"
    with pytest.raises(TemplateError) as caught:
        lookup(path, CTX)
    assert caught.value.path == path
    assert "no index" in str(caught.value)
    with pytest.raises(TemplateError):
        resolve("{{" + path + "}}", CTX)


@pytest.mark.parametrize(("part", "value"), [("0", "a"), ("2", "c"), ("-1", "c"), ("-3", "a")])
def test_good_indexes_read_the_item(part: str, value: str) -> None:
    assert lookup(f"ctx.items.{part}", CTX) == value
