"""The idle workers' wake-up: a nudge is never lost between a claim and a sleep."""

from __future__ import annotations

import threading

from statemachine_wf.stores._common import Wakeup


def test_a_nudge_with_nobody_asleep_wakes_the_next_sleeper_at_once() -> None:
    wakeup = Wakeup()
    wakeup.nudge()  # every worker busy (say, claiming just before the commit)
    assert wakeup.wait(30.0) is True  # returns at once: the missed nudge
    assert wakeup.wait(0.01) is False  # one remembered, not a count


def test_a_nudge_wakes_one_sleeper_and_is_not_remembered_too() -> None:
    wakeup = Wakeup()
    woken: list[bool] = []
    sleeper = threading.Thread(target=lambda: woken.append(wakeup.wait(30.0)))
    sleeper.start()
    while True:  # until the sleeper is asleep
        with wakeup._cond:
            if wakeup._sleeping:
                break
    wakeup.nudge()
    sleeper.join(timeout=30)
    assert woken == [True]
    assert wakeup.wait(0.01) is False  # the nudge went to the sleeper
