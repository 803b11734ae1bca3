"""The idle workers' wake-up: a nudge is never lost between a claim and a sleep."""

from __future__ import annotations

import threading

from statemachine_wf.stores._common import Wakeup


def _asleep(wakeup: Wakeup, count: int = 1) -> None:
    while True:  # until `count` threads are asleep
        with wakeup._cond:
            if wakeup._sleeping >= count:
                return


def test_a_threads_first_wait_returns_at_once() -> None:
    """It may follow a claim made before anybody listened (see wait_for_work)."""
    wakeup = Wakeup()
    assert wakeup.wait(30.0) is True
    assert wakeup.wait(0.01) is False
    other: list[bool] = []
    thread = threading.Thread(target=lambda: other.append(wakeup.wait(30.0)))
    thread.start()
    thread.join(timeout=30)
    assert other == [True]  # per thread


def test_a_nudge_with_nobody_asleep_wakes_the_next_sleeper_at_once() -> None:
    wakeup = Wakeup()
    assert wakeup.wait(30.0) is True  # the first wait
    wakeup.nudge()  # every worker busy (say, claiming just before the commit)
    assert wakeup.wait(30.0) is True  # returns at once: the missed nudge
    assert wakeup.wait(0.01) is False  # one remembered, not a count


def test_a_nudge_wakes_one_sleeper_and_is_not_remembered_too() -> None:
    wakeup = Wakeup()
    woken: list[bool] = []

    def sleep() -> None:
        wakeup.wait(30.0)  # the first wait returns at once
        woken.append(wakeup.wait(30.0))

    sleeper = threading.Thread(target=sleep)
    sleeper.start()
    _asleep(wakeup)
    assert wakeup.wait(0.01) is True  # this thread's first wait
    wakeup.nudge()
    sleeper.join(timeout=30)
    assert woken == [True]
    assert wakeup.wait(0.01) is False  # the nudge went to the sleeper


def test_wake_all_reaches_the_threads_awake_at_that_moment_too() -> None:
    """A reconnected watch wakes everyone: notifications may have been lost meanwhile. A
    worker between its claim and its sleep at that moment must look again, not sleep
    until the safety poll."""
    wakeup = Wakeup()
    asleep: list[bool] = []

    def sleep() -> None:
        wakeup.wait(30.0)
        asleep.append(wakeup.wait(30.0))

    sleeper = threading.Thread(target=sleep)
    sleeper.start()
    _asleep(wakeup)
    assert wakeup.wait(0.01) is True  # the first wait; then this thread "claims"
    wakeup.wake_all()  # meanwhile
    sleeper.join(timeout=30)
    assert asleep == [True]
    assert wakeup.wait(30.0) is True  # at once: it was awake when everyone was woken
    assert wakeup.wait(0.01) is False  # once
    wakeup.nudge()
    assert wakeup.wait(30.0) is True  # a nudge still wakes it as before
