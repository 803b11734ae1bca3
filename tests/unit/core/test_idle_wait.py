"""How long an idle worker sleeps (runtime/idle.py): one timer holder per runner, whose
sleep is counted from when it asked for the next due time, not from when the answer came
back; a holder displaced by an earlier due time does not race the new one's claim; a
holder that woke too early claims again at once, once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from statemachine_wf.runtime.idle import CONTENDED, MARGIN, Idle

T = TypeVar("T")


@pytest.fixture
def idle(monkeypatch: pytest.MonkeyPatch) -> Idle:
    # The clock it reads: 100.004 s, the answer of a next_due asked at 100.0.
    monkeypatch.setattr(time, "monotonic", lambda: 100.004)
    return Idle(poll=5.0)


def in_thread(call: Callable[[], T]) -> T:
    """``call`` on another worker thread (the holder is a thread)."""
    out: list[T] = []
    thread = threading.Thread(target=lambda: out.append(call()))
    thread.start()
    thread.join(timeout=10)
    return out[0]


def test_the_timer_holder_does_not_sleep_the_answers_way_back(idle: Idle) -> None:
    # Due 50 ms after the question; the answer took 4 ms: 46 ms left (and the margin).
    assert idle.wait(0.050, asked=100.0) == pytest.approx(0.046 + MARGIN)
    holder, at = idle._timer
    assert holder == threading.get_ident()
    assert at == pytest.approx(100.050 + MARGIN)


def test_a_due_time_passed_while_the_answer_came_back_is_claimed_at_once(idle: Idle) -> None:
    assert idle.wait(0.002, asked=100.0) == 0.0  # no sleep: claim again now
    assert idle._timer[0] == threading.get_ident()  # and it holds the timer meanwhile


def test_only_one_worker_holds_the_timer_and_an_earlier_due_time_takes_it(idle: Idle) -> None:
    assert idle.wait(0.050, asked=100.0) > 0
    # A later due time: the safety poll (a nudge ends it); nothing due: the poll too.
    assert in_thread(lambda: idle.wait(0.080, asked=100.0)) == 5.0
    assert idle.wait(None, asked=100.0) == 5.0

    def earlier_then_wake() -> tuple[float, bool]:
        wait = idle.wait(0.030, asked=100.0)
        return wait, idle.woke(False)

    # Another worker with an earlier due time takes the timer; it wakes as the holder.
    wait, displaced = in_thread(earlier_then_wake)
    assert wait == pytest.approx(0.026 + MARGIN)
    assert displaced is False


def test_a_displaced_holder_that_times_out_does_not_claim(idle: Idle) -> None:
    idle.wait(0.050, asked=100.0)  # this worker holds the timer...
    in_thread(lambda: idle.wait(0.030, asked=100.0))  # ...until an earlier due time came
    assert idle.woke(False) is True  # timed out, displaced: sleep on, no claim
    assert idle.handed_over() is False  # and no timer to hand over


def test_a_holder_woken_by_a_nudge_claims_and_hands_the_timer_over(idle: Idle) -> None:
    idle.wait(0.050, asked=100.0)
    assert idle.woke(True) is False  # woken: it claims
    assert idle._timer == (None, 0.0)  # the timer given up
    assert idle.handed_over() is True  # its claim passes the baton (once)
    assert idle.handed_over() is False


def test_a_holder_that_woke_too_early_claims_again_once(idle: Idle) -> None:
    idle.wait(0.050, asked=100.0)
    assert idle.woke(False) is False  # timed out as the holder: it claims
    # Its claim came back empty and next_due says due now: it woke a moment early.
    assert idle.wait(0.0, asked=100.0) == 0.0  # claim again at once...
    # ...once; then somebody else has it: a moment's sleep, holding the timer for it.
    assert idle.wait(0.0, asked=100.0) == pytest.approx(CONTENDED)
    holder, at = idle._timer
    assert holder == threading.get_ident()
    assert at == pytest.approx(100.004 + CONTENDED)
    # Any other idle worker sleeps until woken (the safety poll): one worker looks again
    # in a moment, not every idle one (each one's claim and next_due, every 5 ms).
    assert in_thread(lambda: idle.wait(0.0, asked=100.0)) == 5.0


def test_due_work_another_claim_holds_is_polled_for_by_one_worker(idle: Idle) -> None:
    """Due now, the claim empty (the task in another claim, SKIP LOCKED): the first such
    worker sleeps a moment as the timer holder, the others until woken; a real timer due
    sooner than that moment takes the timer over, one due later does not."""
    assert idle.wait(0.0, asked=100.0) == pytest.approx(CONTENDED)
    assert in_thread(lambda: idle.wait(0.0, asked=100.0)) == 5.0
    assert in_thread(lambda: idle.wait(0.050, asked=100.0)) == 5.0
    assert in_thread(lambda: idle.wait(0.0045, asked=100.0)) == pytest.approx(0.0005 + MARGIN)
    assert idle.woke(False) is True  # displaced: it sleeps on, and the new holder claims


def test_a_timer_taken_for_a_due_time_passed_is_handed_over_after_the_claim(idle: Idle) -> None:
    """No sleep, so no `woke` gives it up: kept, the worker woken to take it over saw a
    holder and slept the safety poll while this one ran a step."""
    assert idle.wait(0.002, asked=100.0) == 0.0  # holds the timer while it claims
    assert idle.handed_over() is True  # its claim took work: the timer is handed over
    assert idle._timer == (None, 0.0)
    assert in_thread(lambda: idle.wait(0.080, asked=100.0)) == pytest.approx(0.076 + MARGIN)
