"""The idle workers' wake-up: a nudge is never lost between a claim and a sleep."""

from __future__ import annotations

import threading
from typing import cast

import pytest

from statemachine_wf.core.store import Claim, Claimant
from statemachine_wf.stores._wakeup import Wakeup


def _asleep(wakeup: Wakeup, count: int = 1) -> None:
    while True:  # until `count` threads are asleep
        with wakeup._mutex:
            if wakeup.sleeping >= count:
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


def _primed() -> Wakeup:
    wakeup = Wakeup()
    assert wakeup.wait(0.01) is True  # this thread's first wait
    return wakeup


def test_a_notification_wakes_a_worker_when_no_claim_is_under_way() -> None:
    wakeup = _primed()
    wakeup.notify("t.v1")
    assert wakeup.wait(30.0) is True
    assert wakeup.wait(0.01) is False


def test_a_notification_before_a_claim_is_sent_is_covered_by_it() -> None:
    """The commit notified is in the claim's snapshot: nobody else needs to look."""
    wakeup = _primed()
    with wakeup.claiming(["t.v1"]) as sent:  # say, the finish before a fused claim
        wakeup.notify("t.v1")
        sent()
    assert wakeup.wait(0.01) is False


def test_a_notification_while_a_claim_is_in_flight_wakes_a_worker_once_it_returned() -> None:
    """That claim's snapshot may be older than the commit notified."""
    wakeup = _primed()
    with wakeup.claiming(["t.v1"]) as sent:
        sent()
        wakeup.notify("t.v1")
        assert wakeup.wait(0.01) is False  # held while the claim is in flight
    assert wakeup.wait(30.0) is True  # then a worker looks


def test_a_later_claim_covers_what_an_earlier_one_in_flight_held() -> None:
    wakeup = _primed()
    with wakeup.claiming(["t.v1"]) as first:
        first()
        wakeup.notify("t.v1")
        with wakeup.claiming(["t.v1", "u.v1"]) as second:
            second()
    assert wakeup.wait(0.01) is False


def test_a_notification_for_a_type_no_claim_takes_wakes_a_worker_at_once() -> None:
    wakeup = _primed()
    with wakeup.claiming(["t.v1"]) as sent:
        wakeup.notify("release")  # not a type: released tasks, a signal, a lock
        assert wakeup.wait(30.0) is True
        wakeup.notify("u.v1")
        assert wakeup.wait(30.0) is True
        sent()
    assert wakeup.wait(0.01) is False


def test_a_claim_that_raises_wakes_a_worker() -> None:
    """It may have covered a notification and taken nothing."""
    wakeup = _primed()
    try:
        with wakeup.claiming(["t.v1"]) as sent:
            wakeup.notify("t.v1")
            sent()
            raise OSError("the connection broke")
    except OSError:
        pass
    assert wakeup.wait(30.0) is True
    with wakeup.claiming(["t.v1"]):
        pass  # nothing left under way or held
    assert wakeup.wait(0.01) is False


def test_a_baton_of_several_types_is_held_only_while_each_has_a_claim_under_way() -> None:
    """The baton says another task of one of the claim's types is due, not which: only a
    claim of every one of them covers it."""
    wakeup = _primed()
    with wakeup.claiming(["t.v1"]):
        wakeup.notify("t.v1", "u.v1")
        assert wakeup.wait(30.0) is True  # no claim of u.v1 under way: at once
    with wakeup.claiming(["t.v1", "u.v1"]) as sent:
        wakeup.notify("t.v1", "u.v1")
        assert wakeup.wait(0.01) is False  # held
        sent()
    assert wakeup.wait(0.01) is False  # covered by the claim sent after it
    with wakeup.claiming(["t.v1", "u.v1"]) as sent:
        sent()
        wakeup.notify("t.v1", "u.v1")
        with wakeup.claiming(["t.v1"]) as partly:
            partly()  # covers t.v1 only
    assert wakeup.wait(30.0) is True  # u.v1's part woke a worker once the claims returned
    assert wakeup.wait(0.01) is False


def _sleeper(
    wakeup: Wakeup,
    types: list[str],
    woken: list[bool],
    claimant: Claimant | None = None,
    timeout: float = 30.0,
) -> threading.Thread:
    def sleep() -> None:
        wakeup.wait(30.0)  # the first wait returns at once
        woken.append(wakeup.wait(timeout, types, claimant))

    thread = threading.Thread(target=sleep)
    before = wakeup.sleeping
    thread.start()
    _asleep(wakeup, before + 1)
    return thread


RUNNER = Claimant("w", 30.0, "host:1:a", frozenset({"t.v1"}))


def _claim() -> Claim:
    return cast(Claim, object())  # the wake-up hands it on as it is


def test_a_start_takes_a_sleeper_that_claims_its_type_one_start_a_sleeper() -> None:
    """A start made in this process is handed to a worker asleep that claims its type;
    each such worker is taken by one start (the next one tells everyone)."""
    wakeup = _primed()
    other: list[bool] = []
    stranger = _sleeper(wakeup, ["u.v1"], other)
    assert wakeup.promise("t.v1") is None  # asleep, but it never claims t.v1
    woken: list[bool] = []
    host = _sleeper(wakeup, ["t.v1", "u.v1"], woken)
    taken = wakeup.promise("t.v1")
    assert taken is not None
    assert wakeup.promise("t.v1") is None  # the one host is taken already
    wakeup.nudge()  # a nudge meanwhile wakes the stranger, never the host taken
    stranger.join(timeout=30)
    assert other == [True]
    wakeup.keep(taken[0], "t.v1")  # the start committed: the host woken
    host.join(timeout=30)
    assert woken == [True]
    assert wakeup.sleeping == 0


def test_a_promise_given_back_wakes_nobody() -> None:
    """The start made nothing (its idempotency key was taken): nobody needs to look."""
    wakeup = _primed()
    woken: list[bool] = []
    host = _sleeper(wakeup, ["t.v1"], woken)
    taken = wakeup.promise("t.v1")
    assert taken is not None
    wakeup.keep(taken[0], "t.v1", made=False)
    assert wakeup.sleeping == 1  # asleep again
    taken = wakeup.promise("t.v1")  # free to take again
    assert taken is not None
    wakeup.keep(taken[0], "t.v1")
    host.join(timeout=30)
    assert woken == [True]


def test_a_kept_start_is_left_to_a_claim_of_its_type_under_way() -> None:
    """As a notification: a claim sent after the commit sees the task."""
    wakeup = _primed()
    woken: list[bool] = []
    host = _sleeper(wakeup, ["t.v1"], woken)
    taken = wakeup.promise("t.v1")
    assert taken is not None
    with wakeup.claiming(["t.v1"]) as sent:
        wakeup.keep(taken[0], "t.v1")
        sent()
    assert wakeup.sleeping == 1  # covered by the claim
    taken = wakeup.promise("t.v1")
    assert taken is not None
    with wakeup.claiming(["t.v1"]) as sent:
        sent()  # in flight: its snapshot may be older than the commit
        wakeup.keep(taken[0], "t.v1")
        assert wakeup.sleeping == 1
    host.join(timeout=30)  # woken once that claim returned
    assert woken == [True]


def test_a_leased_start_hands_its_claim_to_the_sleeper_it_took() -> None:
    """Even with a claim of the type under way: the task is leased, nobody else takes it."""
    wakeup = _primed()
    woken: list[bool] = []
    host = _sleeper(wakeup, ["t.v1"], woken, RUNNER)
    taken = wakeup.promise("t.v1")
    assert taken is not None
    assert taken[1] == RUNNER  # whom the start leases its task to
    claim = _claim()
    with wakeup.claiming(["t.v1"]):
        wakeup.keep(taken[0], "t.v1", claim=claim)
    host.join(timeout=30)
    assert woken == [True]
    assert wakeup.handed(RUNNER) is claim
    assert wakeup.handed(RUNNER) is None  # once


def test_a_start_leases_nothing_while_a_claim_of_its_type_is_under_way() -> None:
    """A worker finishing an instance claims in the same statement: the start is left to
    that claim, and the sleeper only woken if it comes back without it."""
    wakeup = _primed()
    woken: list[bool] = []
    host = _sleeper(wakeup, ["t.v1"], woken, RUNNER)
    with wakeup.claiming(["t.v1"]):
        taken = wakeup.promise("t.v1")
        assert taken is not None
        assert taken[1] is None
        wakeup.keep(taken[0], "t.v1")
    host.join(timeout=30)  # no claim sent after the commit: woken to claim it
    assert woken == [True]
    assert wakeup.handed(RUNNER) is None


def test_a_start_takes_the_sleeper_with_the_longest_sleep_left() -> None:
    wakeup = _primed()
    short: list[bool] = []
    brief = _sleeper(wakeup, ["t.v1"], short, RUNNER, timeout=5.0)
    long: list[bool] = []
    host = _sleeper(wakeup, ["t.v1"], long, RUNNER, timeout=60.0)
    taken = wakeup.promise("t.v1")
    assert taken is not None
    wakeup.keep(taken[0], "t.v1", claim=_claim())
    host.join(timeout=30)
    assert long == [True]
    assert short == []
    wakeup.nudge()
    brief.join(timeout=30)


def test_a_claim_leased_to_a_sleeper_whose_sleep_ran_out_waits_for_its_next_wait() -> None:
    """The sleep ran out between the start's promise and its commit: that thread went on,
    and the claim is run by the next thread of the same claimant to look."""
    wakeup = _primed()
    woken: list[bool] = []
    host = _sleeper(wakeup, ["t.v1"], woken, RUNNER, timeout=1.0)
    taken = wakeup.promise("t.v1")
    assert taken is not None
    host.join(timeout=30)
    assert woken == [False]  # ran out: not woken by the start
    stranger = Claimant("x", 30.0, "host:2:b", frozenset({"t.v1"}))
    claim = _claim()
    wakeup.keep(taken[0], "t.v1", claim=claim)
    assert wakeup.wait(0.01, ["t.v1"], stranger) is False  # another runner's: not its claim
    assert wakeup.wait(30.0, ["t.v1"], RUNNER) is True  # at once
    assert wakeup.handed(RUNNER) is claim


def test_a_claim_leased_to_a_sleeper_gone_wakes_another_of_its_claimant() -> None:
    wakeup = _primed()
    gone: list[bool] = []
    host = _sleeper(wakeup, ["t.v1"], gone, RUNNER, timeout=1.0)
    taken = wakeup.promise("t.v1")
    assert taken is not None
    host.join(timeout=30)
    woken: list[bool] = []
    other = Claimant("x", 30.0, "host:2:b", frozenset({"t.v1"}))
    foreign: list[bool] = []
    stranger = _sleeper(wakeup, ["t.v1"], foreign, other)
    sibling = _sleeper(wakeup, ["t.v1"], woken, RUNNER)
    claim = _claim()
    wakeup.keep(taken[0], "t.v1", claim=claim)
    sibling.join(timeout=30)
    assert woken == [True]
    assert foreign == []  # the other claimant's sleeper sleeps on
    assert wakeup.handed(RUNNER) is claim
    wakeup.wake_all()
    stranger.join(timeout=30)


def test_a_notification_wakes_a_sleeper_that_claims_its_type() -> None:
    """Two runners of different types on one store object sleep in one queue: the one
    woken for a task is one that claims it, whatever the order they fell asleep in."""
    wakeup = _primed()
    other: list[bool] = []
    stranger = _sleeper(wakeup, ["u.v1"], other)
    woken: list[bool] = []
    host = _sleeper(wakeup, ["t.v1"], woken)
    wakeup.notify("t.v1")
    host.join(timeout=30)
    assert woken == [True]
    assert other == []
    wakeup.notify("release")  # not a type anybody claims: the first sleeper
    stranger.join(timeout=30)
    assert other == [True]


def test_a_held_notification_released_wakes_a_sleeper_of_its_type() -> None:
    wakeup = _primed()
    other: list[bool] = []
    stranger = _sleeper(wakeup, ["u.v1"], other)
    woken: list[bool] = []
    host = _sleeper(wakeup, ["t.v1"], woken)
    with wakeup.claiming(["t.v1"]):
        wakeup.notify("t.v1")  # held: the claim under way may cover it
    host.join(timeout=30)  # it sent no claim after: woken, the one that claims t.v1
    assert woken == [True]
    assert other == []
    wakeup.nudge()
    stranger.join(timeout=30)


def _announced(wakeup: Wakeup) -> list[list[str]]:
    told: list[list[str]] = []
    wakeup.announce = lambda types: told.append(sorted(types))
    return told


def test_a_start_with_no_claim_of_its_type_under_way_tells_everyone() -> None:
    wakeup = _primed()
    told = _announced(wakeup)
    with wakeup.claiming(["u.v1"]), wakeup.starting("t.v1") as made:
        assert made is None  # the start's own statement notifies every process
    assert told == []
    assert wakeup.wait(0.01) is False  # nothing held for it here either


def test_a_start_while_a_claim_of_its_type_is_under_way_is_held_for_this_process() -> None:
    """No other process is told: a worker here is woken for it once the claims under way
    are done, as for a notification they may not have covered."""
    wakeup = _primed()
    told = _announced(wakeup)
    woken: list[bool] = []
    with wakeup.claiming(["t.v1"]) as sent:
        sent()  # in flight: its snapshot may be older than the start's commit
        with wakeup.starting("t.v1") as made:
            assert made is not None
            made()
        host = _sleeper(wakeup, ["t.v1"], woken)  # a worker done with its step
        assert woken == []  # held while the claim is in flight
    host.join(timeout=30)
    assert woken == [True]
    assert told == []


def test_a_held_start_that_no_worker_here_takes_at_once_is_announced() -> None:
    """Every worker of the process is busy: the other processes are told after all."""
    wakeup = _primed()
    told = _announced(wakeup)
    other: list[bool] = []
    stranger = _sleeper(wakeup, ["u.v1"], other)  # asleep, but it claims another type
    with wakeup.claiming(["t.v1"]) as sent:
        sent()
        with wakeup.starting("t.v1") as made:
            assert made is not None
            made()
    assert told == [["t.v1"]]  # the sleeper woken (the nudge's first) does not claim it
    stranger.join(timeout=30)
    assert other == [True]


def test_a_claim_that_ends_before_the_held_start_commits_does_not_let_go_early() -> None:
    """Let go before the commit, the worker woken could claim before it and find
    nothing, and the task would be left to the polls: the start counts as under way."""
    wakeup = _primed()
    told = _announced(wakeup)
    woken: list[bool] = []
    with wakeup.starting("t.v1") as unheld:
        assert unheld is None  # nothing under way yet: this start tells everyone
    claim = wakeup.claiming(["t.v1"])
    claim.__enter__()
    with wakeup.starting("t.v1") as made:
        assert made is not None
        claim.__exit__(None, None, None)  # the claim returns before the commit
        host = _sleeper(wakeup, ["t.v1"], woken)
        made()  # the commit
        assert woken == []
    host.join(timeout=30)
    assert woken == [True]
    assert told == []


def test_a_claim_sent_after_a_held_start_committed_covers_it() -> None:
    wakeup = _primed()
    told = _announced(wakeup)
    with wakeup.claiming(["t.v1"]):
        with wakeup.starting("t.v1") as made:
            assert made is not None
            made()
        with wakeup.claiming(["t.v1"]) as sent:
            sent()  # its snapshot holds the start's commit
    assert told == []
    assert wakeup.wait(0.01) is False


def test_a_start_whose_key_was_taken_holds_nothing() -> None:
    wakeup = _primed()
    told = _announced(wakeup)
    with wakeup.claiming(["t.v1"]), wakeup.starting("t.v1") as made:
        assert made is not None  # not called: nothing was made
    assert told == []
    assert wakeup.wait(0.01) is False


def test_a_typed_wake_up_with_only_other_types_asleep_is_kept_for_a_worker_of_its_type() -> None:
    """The worker of the type was awake (between its question and its sleep): it looks
    again at its next wait instead of sleeping through the wake-up (a timer handed over
    to a runner whose other worker was about to sleep: the timer fired only once a worker
    came back from a step)."""
    wakeup = _primed()
    other: list[bool] = []
    stranger = _sleeper(wakeup, ["u.v1"], other)
    wakeup.nudge(["t.v1"])
    stranger.join(timeout=30)
    assert other == [True]  # woken all the same, as before
    assert wakeup.wait(0.01, ["u.v1"]) is False  # not for u.v1
    assert wakeup.wait(30.0, ["t.v1"]) is True  # kept for t.v1: at once
    assert wakeup.wait(0.01, ["t.v1"]) is False  # once


def test_sleeps_gives_the_soonest_wake_of_each_set_of_types() -> None:
    wakeup = Wakeup()
    assert wakeup.sleeps() == {}
    threads = []
    for types, sleep in ((("a",), 30.0), (("a",), 60.0), (("b", "c"), 45.0)):

        def sleeper(types: tuple[str, ...] = types, sleep: float = sleep) -> None:
            wakeup.wait(0.0, types)  # the first wait
            wakeup.wait(sleep, types)

        threads.append(threading.Thread(target=sleeper))
        threads[-1].start()
        _asleep(wakeup, len(threads))
    sleeps = wakeup.sleeps()
    assert set(sleeps) == {frozenset({"a"}), frozenset({"b", "c"})}
    assert sleeps[frozenset({"b", "c"})] - sleeps[frozenset({"a"})] == pytest.approx(15, abs=5)
    wakeup.wake_all()
    for thread in threads:
        thread.join(timeout=30)
    assert wakeup.sleeps() == {}


def test_claims_handed_over_wake_one_sleeper_of_the_claimant_each_longest_sleep_first() -> None:
    """A claim that took tasks for a runner's idle workers hands them over: one claim a
    sleeper of that runner, the timer holder's short sleep last; another runner's
    sleepers sleep on."""
    wakeup = _primed()
    other = Claimant("x", 30.0, "host:2:b", frozenset({"t.v1"}))
    foreign: list[bool] = []
    stranger = _sleeper(wakeup, ["t.v1"], foreign, other)
    short: list[bool] = []
    holder = _sleeper(wakeup, ["t.v1"], short, RUNNER, timeout=5.0)
    long: list[bool] = []
    host = _sleeper(wakeup, ["t.v1"], long, RUNNER, timeout=60.0)
    first, second = _claim(), _claim()
    wakeup.hand(RUNNER, [first])
    host.join(timeout=30)
    assert long == [True]
    assert short == []
    assert foreign == []
    assert wakeup.handed(RUNNER) is first
    wakeup.hand(RUNNER, [second])
    holder.join(timeout=30)
    assert short == [True]
    assert wakeup.handed(RUNNER) is second
    assert wakeup.handed(RUNNER) is None
    assert foreign == []
    wakeup.wake_all()
    stranger.join(timeout=30)


def test_claims_handed_over_beyond_the_sleepers_wait_for_the_next_thread_to_look() -> None:
    """More claims than sleepers (a sleeper woke meanwhile): the rest is run by the next
    thread of the claimant to wait, in the order the claim took them."""
    wakeup = _primed()
    woken: list[bool] = []
    host = _sleeper(wakeup, ["t.v1"], woken, RUNNER)
    claims = [_claim(), _claim(), _claim()]
    wakeup.hand(RUNNER, claims)
    host.join(timeout=30)
    assert woken == [True]
    assert wakeup.sleeping == 0
    stranger = Claimant("x", 30.0, "host:2:b", frozenset({"t.v1"}))
    assert wakeup.wait(0.01, ["t.v1"], stranger) is False  # not another runner's
    assert wakeup.wait(30.0, ["t.v1"], RUNNER) is True  # at once
    assert [wakeup.handed(RUNNER) for _ in range(4)] == [*claims, None]


def test_a_worker_that_did_not_sleep_takes_only_the_claims_no_sleeper_was_woken_for() -> None:
    """Three claims, one sleeper woken: a busy worker of the claimant (``spare``) may take
    the two nobody was woken for, never the woken sleeper's, which it would then claim
    for on its own."""
    wakeup = _primed()
    woken: list[bool] = []
    host = _sleeper(wakeup, ["t.v1"], woken, RUNNER)
    claims = [_claim(), _claim(), _claim()]
    wakeup.hand(RUNNER, claims)
    host.join(timeout=30)
    assert woken == [True]
    assert wakeup.handed(RUNNER, spare=True) is claims[0]
    assert wakeup.handed(RUNNER, spare=True) is claims[1]
    assert wakeup.handed(RUNNER, spare=True) is None  # the woken sleeper's
    assert wakeup.handed(RUNNER) is claims[2]
    assert wakeup.handed(RUNNER) is None


def test_sleeping_and_waking_tell_the_changed_hook_and_asleep_counts_by_claimant() -> None:
    wakeup = _primed()
    calls: list[int] = []
    wakeup.changed = lambda: calls.append(sum(wakeup.asleep().values()))
    woken: list[bool] = []
    host = _sleeper(wakeup, ["t.v1"], woken, RUNNER)
    assert wakeup.asleep() == {RUNNER: 1}
    wakeup.nudge(["t.v1"])
    host.join(timeout=30)
    assert calls == [1, 0]  # asleep, then awake
    assert wakeup.asleep() == {}


def test_a_claim_no_thread_took_can_be_withdrawn_once() -> None:
    """``hand`` says how many of its claims no thread was woken for; such a claim can be
    taken back (a start another process leased to a runner whose workers stay busy),
    once, and then no thread gets it."""
    wakeup = _primed()
    woken: list[bool] = []
    host = _sleeper(wakeup, ["t.v1"], woken, RUNNER)
    first, second = _claim(), cast(Claim, object())
    assert wakeup.hand(RUNNER, [first, second]) == 1  # one thread asleep
    host.join(timeout=30)
    assert woken == [True]
    assert wakeup.withdraw(RUNNER, second)
    assert not wakeup.withdraw(RUNNER, second)  # once
    assert wakeup.handed(RUNNER, spare=True) is None  # the woken thread's claim is not spare
    assert wakeup.handed(RUNNER) is first
    assert not wakeup.withdraw(RUNNER, first)  # taken already
    assert wakeup.handed(RUNNER) is None
