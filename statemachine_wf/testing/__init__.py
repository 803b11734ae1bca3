"""Property-test your own workflows: hypothesis strategies and a rule-based state machine.

Needs the ``[testing]`` extra (hypothesis)::

    from statemachine_wf.testing import WorkflowStateMachine, from_model, outcomes

    class TestOrder(
        WorkflowStateMachine.for_workflow(
            Order,
            inputs=from_model(OrderInput),
            outcomes={"charge": outcomes(errors=[Retry("card network down")])},
            dependencies=lambda: {"bank": FakeBank()},
        )
    ):
        pass

    TestOrderCase = TestOrder.TestCase

or, as a plain test body, ``check_workflow(Order, inputs=..., max_examples=50)``.
"""

from .machine import (
    Invariants,
    InvariantViolation,
    WorkflowStateMachine,
    check_workflow,
    committed_outcomes,
    sqlite_store,
)
from .stepper import BOUNDARIES, Crash, FaultyStore, Ghost, Stepper, TickResult
from .strategies import (
    DEFAULT_ERRORS,
    Outcome,
    Proceed,
    Raise,
    Return,
    always,
    from_model,
    outcomes,
)

__all__ = [
    "BOUNDARIES",
    "DEFAULT_ERRORS",
    "Crash",
    "FaultyStore",
    "Ghost",
    "InvariantViolation",
    "Invariants",
    "Outcome",
    "Proceed",
    "Raise",
    "Return",
    "Stepper",
    "TickResult",
    "WorkflowStateMachine",
    "always",
    "check_workflow",
    "committed_outcomes",
    "from_model",
    "outcomes",
    "sqlite_store",
]
