"""The size limits follow one rule, given to ``Config`` or read from their variables.

Before: ``SWF_MAX_DAG_BYTES`` had to be from 2 (the floor of the node count, shared by
mistake) while ``Config(max_dag_bytes=1)`` was accepted; ``Config`` took 10**18, 1.5 or
True that the variable refused; and the two paths said it in different words.
"""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_wf import Config
from statemachine_wf.definition.limits import max_dag_bytes, max_dag_nodes

# field, variable, floor
LIMITS = [
    ("max_dag_bytes", "SWF_MAX_DAG_BYTES", 1),
    ("max_dag_nodes", "SWF_MAX_DAG_NODES", 2),
    ("max_payload_bytes", "SWF_MAX_PAYLOAD_BYTES", 1),
]


def _rule(field: str, variable: str, low: int) -> str:
    return f"{field} / {variable} must be an integer from {low} to 10**18 - 1, got "


@pytest.mark.parametrize(("field", "variable", "low"), LIMITS)
def test_the_floor_and_the_ceiling_are_the_same_both_ways(
    field: str, variable: str, low: int
) -> None:
    for good in (low, 10**18 - 1):
        kwargs: dict[str, Any] = {field: good}  # a field named at run time
        assert getattr(Config(**kwargs), field) == good
        assert getattr(Config.from_env({variable: str(good)}), field) == good
    for bad in (low - 1, -5, 10**18):
        kwargs = {field: bad}
        with pytest.raises(ValueError, match="must be an integer from") as given:
            Config(**kwargs)
        with pytest.raises(ValueError, match="must be an integer from") as read:
            Config.from_env({variable: str(bad)})
        # One message: the environment's adds only which kind of setting it was.
        assert str(given.value) == _rule(field, variable, low) + str(bad)
        assert str(read.value) == f"bad SWF_* setting: {given.value}"


@pytest.mark.parametrize(("field", "variable", "low"), LIMITS)
def test_a_value_that_is_not_a_whole_number_is_refused_both_ways(
    field: str, variable: str, low: int
) -> None:
    for bad in (1.5, 4096.0, True, "4096"):
        kwargs: dict[str, Any] = {field: bad}  # a field named at run time, a wrong type
        with pytest.raises(ValueError, match="must be an integer from") as given:
            Config(**kwargs)
        assert str(given.value) == _rule(field, variable, low) + repr(bad)
    for text in ("1.5", "many", "0x10"):
        with pytest.raises(ValueError, match="must be an integer from") as read:
            Config.from_env({variable: text})
        assert str(read.value) == f"bad SWF_* setting: {_rule(field, variable, low)}{text!r}"


def test_a_one_byte_dag_limit_is_accepted_from_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The example of the disagreement: 1 was a valid Config value, refused from the env."""
    assert Config.from_env({"SWF_MAX_DAG_BYTES": "1"}).max_dag_bytes == 1
    monkeypatch.setenv("SWF_MAX_DAG_BYTES", "1")
    monkeypatch.setenv("SWF_MAX_DAG_NODES", "2")
    assert (max_dag_bytes(), max_dag_nodes()) == (1, 2)
    monkeypatch.setenv("SWF_MAX_DAG_NODES", "1")
    with pytest.raises(ValueError, match="max_dag_nodes / SWF_MAX_DAG_NODES must be"):
        max_dag_nodes()
