"""How long an idle worker sleeps (Runner._idle_wait): the timer holder's sleep is
counted from when it asked for the next due time, not from when the answer came back."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from statemachine_wf import COMPLETED, Runner, RunnerOptions, StepContext, Workflow, step
from statemachine_wf.runtime import runner as runner_module
from statemachine_wf.stores.sqlite import SQLiteStore


class In(BaseModel):
    pass


class Idle(Workflow[In, In]):
    workflow_type = "t.idlewait.v1"

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, In]) -> None:
        return None


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Runner:
    # The clock the runner reads: 100.004 s, the answer of a next_due asked at 100.0.
    monkeypatch.setattr(time, "monotonic", lambda: 100.004)
    return Runner(
        SQLiteStore(str(tmp_path / "swf.db")), [Idle], options=RunnerOptions(idle_poll=5.0)
    )


def test_the_timer_holder_does_not_sleep_the_answers_way_back(runner: Runner) -> None:
    # Due 50 ms after the question; the answer took 4 ms: 46 ms left (and the margin).
    wait = runner._idle_wait(0.050, asked=100.0)
    assert wait == pytest.approx(0.046 + runner_module._MARGIN)
    holder, at = runner._timer
    assert holder == threading.get_ident()
    assert at == pytest.approx(100.050 + runner_module._MARGIN)


def test_a_due_time_passed_while_the_answer_came_back_is_claimed_at_once(runner: Runner) -> None:
    assert runner._idle_wait(0.002, asked=100.0) == 0.0  # no sleep: claim again now
    assert runner._timer[0] == threading.get_ident()  # and it holds the timer meanwhile


def test_only_one_worker_holds_the_timer(runner: Runner) -> None:
    assert runner._idle_wait(0.050, asked=100.0) > 0
    other: list[float] = []
    thread = threading.Thread(target=lambda: other.append(runner._idle_wait(0.080, asked=100.0)))
    thread.start()
    thread.join(timeout=10)
    assert other == [5.0]  # a later due time: the safety poll, woken by a nudge
    assert runner._idle_wait(None, asked=100.0) == 5.0  # nothing due
