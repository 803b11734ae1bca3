"""Runtime bugs the state machine found, pinned as deterministic stepper scenarios.

Each was found by the property helper and pinned as ``xfail(strict=True)``; all are fixed.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from pydantic import BaseModel

from statemachine_wf.definition.events import Ev, Status
from statemachine_wf.definition.retry import RetryPolicy
from statemachine_wf.definition.workflow import COMPLETED, Workflow, step
from statemachine_wf.errors import Retry
from statemachine_wf.testing import (
    Proceed,
    Raise,
    Stepper,
    check_workflow,
    outcomes,
    sqlite_store,
)

from .workflows import Transfer, TransferInput, transfer_world


class PollInput(BaseModel):
    n: int = 0


class PollProgress(BaseModel):
    seen: int | None = None


class Poll(Workflow[PollInput, PollProgress]):
    workflow_type = "test.poll.v1"

    @step(initial=True, to=COMPLETED, retry=RetryPolicy(max_attempts=2, on_exhausted="fail"))
    def poll(self, ctx: object) -> None:
        return None


def test_reconcile_failure_at_startup_is_recorded(tmp_path: Path) -> None:
    stepper = Stepper(
        Transfer,
        sqlite_store(str(tmp_path / "swf.db")),
        dependencies=transfer_world(),
        outcomes=lambda step, attempt: Raise(Retry("rpc down")) if attempt == 1 else Proceed(),
        reconcile_outcomes=lambda step, attempt: Raise(Retry("node unreachable")),
    )
    stepper.start(TransferInput(sender="a", amount=1, drops=0))
    stepper.tick()  # sign, attempt 1: Retry -> RUNNING, waiting out its back-off
    stepper.tick(restart=True, let_time_pass=True)  # start-up pass: the hook raises
    kinds = [e.event_type for e in stepper.store.events(stepper.instance_id or "")]
    assert kinds.count(Ev.STEP_FAILED) == 1, "the attempt's own failure, once"
    assert kinds.count(Ev.RECONCILE_FAILED) == 1, "the hook's failure is in the log"
    stepper.close()


def test_failure_count_survives_a_crash_after_the_claim(tmp_path: Path) -> None:
    stepper = Stepper(
        Poll,
        sqlite_store(str(tmp_path / "swf.db")),
        outcomes=lambda step, attempt: Raise(Retry("not yet")),
    )
    stepper.start(PollInput())
    stepper.tick()  # attempt 1 fails: 1 consecutive failure of 2 allowed
    assert stepper.tick(crash="after_claim").crashed == "after_claim"
    stepper.tick()  # a new runner: the in-doubt attempt 2 is restarted as attempt 3
    stepper.tick()  # attempt 3 fails: the 2nd failure, the policy is exhausted
    events = stepper.store.events(stepper.instance_id or "")
    assert [e.payload["failures"] for e in events if e.event_type == Ev.STEP_FAILED] == [1, 2]
    assert stepper.record.status == Status.FAILED
    stepper.close()


def test_state_machine_finds_the_failure_count_reset() -> None:
    check_workflow(
        Poll,
        outcomes={"poll": outcomes(errors=[Retry("not yet")], failure_percent=60)},
        settings=settings(
            max_examples=300,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        ),
    )
