"""Defect 9 of issue 14: one error type for bad input on every producer path.

``start`` raised pydantic's ``ValidationError`` while ``start_many`` raised
``InputError``; now every path raises :class:`InputError` (also a ``ValueError``) naming
the field and the problem, with pydantic's error as ``__cause__``, and writes nothing.
``UndeclaredTransition`` is what an undeclared target records (it was never used).
"""

from __future__ import annotations

from datetime import datetime

import pytest
from pydantic import ValidationError

from statemachine_wf import Client, InputError, Status, Store, UndeclaredTransition
from statemachine_wf.client.dag import DagClient
from statemachine_wf.core import decide
from tests.integration.dag.helpers import linear
from tests.unit.core.test_decide import SPEC, created

from .flows import Echo


def test_start_and_start_many_raise_the_same_input_error(store: Store) -> None:
    client = Client(store, [Echo])
    secret = "0xSECRET-VALUE"
    with pytest.raises(InputError) as one:
        client.start(Echo, {"n": secret})
    with pytest.raises(InputError) as many:
        client.start_many(Echo, [{"n": 1}, {"n": secret}])
    assert str(one.value) == "input does not fit Order: n: " + _int_message()
    assert str(many.value) == "inputs[1] does not fit Order: n: " + _int_message()
    for info in (one, many):
        assert isinstance(info.value.__cause__, ValidationError)
        assert info.value.__cause__.errors()[0]["loc"] == ("n",)
        assert secret not in str(info.value)  # a value may be a secret: named, not shown
        assert isinstance(info.value, ValueError)
    with pytest.raises(InputError, match=r"input does not fit Order: n: Field required"):
        client.start("inbox.echo.v1", {})
    assert store.list_instances() == []


def _int_message() -> str:
    return "Input should be a valid integer, unable to parse string as an integer"


def test_schedule_errors_are_input_errors_too(store: Store) -> None:
    client = Client(store, [Echo])
    with pytest.raises(InputError, match="priority must be >= 0"):
        client.start(Echo, {"n": 1}, priority=-1)
    with pytest.raises(InputError, match="delay must be >= 0"):
        client.start_many(Echo, [{"n": 1}], delay=-1)
    with pytest.raises(InputError, match="timezone-aware"):
        client.start(Echo, {"n": 1}, run_at=datetime(2030, 1, 1))  # naive: the point
    with pytest.raises(InputError, match="priority must be >= 0"):
        DagClient(store).start(linear(), {"x": 1}, priority=-1)
    assert store.list_instances() == []
    assert client.get(client.start(Echo, {"n": 1})).status == Status.PENDING


def test_an_undeclared_target_records_undeclared_transition() -> None:
    state = decide.start(created(), "first").state
    d = decide.success(SPEC, state, "first", 1, "third", {})
    assert d.state.status == Status.FAILED
    assert d.state.error is not None
    assert d.state.error["code"] == "undeclared_transition"
    assert d.state.error["type"] == "statemachine_wf.errors.UndeclaredTransition"
    assert d.state.error["message"] == "step 'first' returned 'third'; it declares only ['second']"
    assert d.state.error["recoverable"] is False
    assert UndeclaredTransition("a", "b", ["c"]).code == "undeclared_transition"
