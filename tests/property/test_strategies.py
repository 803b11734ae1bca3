"""The strategies module and the public surface of statemachine_wf.testing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import statemachine_wf.testing as testing
from statemachine_wf.testing import Outcome, Proceed, Raise, Return, from_model, outcomes

from .workflows import OrderInput, TransferInput


def test_exported_members() -> None:
    assert sorted(testing.__all__) == sorted(
        [
            "BOUNDARIES", "DEFAULT_ERRORS", "Crash", "FaultyStore", "Ghost", "InvariantViolation",
            "Invariants", "Outcome", "Proceed", "Raise", "Return", "Stepper", "TickResult",
            "WorkflowStateMachine", "always", "check_workflow", "committed_outcomes",
            "from_model", "outcomes", "sqlite_store",
        ]
    )  # fmt: skip
    assert all(hasattr(testing, name) for name in testing.__all__)


@given(from_model(OrderInput))
def test_from_model_respects_the_constraints(order: OrderInput) -> None:
    assert 1 <= len(order.order_id) <= 8
    assert order.order_id.isalnum()
    assert 1 <= order.amount <= 10_000


@given(from_model(TransferInput, drops=st.just(2)))
def test_from_model_takes_overrides(transfer: TransferInput) -> None:
    assert transfer.drops == 2
    assert TransferInput.model_validate_json(transfer.model_dump_json()) == transfer


@given(outcomes(returns=["a", "b"]))
def test_outcomes_are_outcomes(outcome: Outcome) -> None:
    assert isinstance(outcome, Proceed | Return | Raise)
    if isinstance(outcome, Raise):
        first, second = outcome.exception(), outcome.exception()
        assert first is not second
        assert type(first) is type(outcome.error)
