"""``nests_deeper`` measures the depth of JSON text without decoding it: the depth of any
value's JSON, brackets, quotes and backslashes inside its strings included, and of text
that is not JSON as its running count of brackets says."""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_wf.definition.limits import nests_deeper

# Strings full of what the scan must not mistake for structure.
_TRICKY = st.text(alphabet=st.sampled_from('[]{}"\\a\u00e9\ud800\x00 :,'), max_size=8)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | _TRICKY,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TRICKY, inner, max_size=4),
    max_leaves=40,
)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@settings(max_examples=400, deadline=None)
@given(_VALUES, st.booleans(), st.integers(min_value=0, max_value=8))
def test_the_depth_of_any_value_as_json(value: Any, ascii_only: bool, limit: int) -> None:
    for separators in (None, (",", ":")):
        text = json.dumps(value, ensure_ascii=ascii_only, separators=separators)
        assert nests_deeper(text, limit) == (_depth(value) > limit), text


def _running_count(text: str, limit: int) -> bool:
    """The plain definition, for text that is not JSON: strings (a regex) out, then the
    running count of the brackets left."""
    outside = re.sub(r'"[^"\\]*(?:\\.[^"\\]*)*"', "", text)
    steps = [1 if c in "[{" else -1 for c in outside if c in "[]{}"]
    return max(accumulate(steps), default=0) > limit


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from('[[]]{}"a'), max_size=24), st.integers(0, 6))
def test_text_that_is_not_json_is_counted_as_it_runs(text: str, limit: int) -> None:
    if text.count('"') % 2 == 0:  # an unclosed string hides the rest from the decoder
        assert nests_deeper(text, limit) == _running_count(text, limit), text


def test_a_long_chain_and_a_wide_value_at_the_limit() -> None:
    for depth in (95, 96, 97, 100_000):
        assert nests_deeper("[" * depth + "]" * depth, 96) == (depth > 96)
        assert nests_deeper('{"a":' * depth + "1" + "}" * depth, 96) == (depth > 96)
    wide = json.dumps([[{"k": [i, "]]]]"]} for i in range(500)]])
    assert not nests_deeper(wide, 4)
    assert nests_deeper(wide, 3)
    assert nests_deeper("[" * 200, 96)  # unbalanced, and deep as it runs
