"""The locks' contract (``ports.Locks``), on SQLite and PostgreSQL."""

from __future__ import annotations

import time

from statemachine_wf.core import decide
from statemachine_wf.core.store import Commit, Store
from tests.integration.core.test_store_contract import new

from .helpers import TYPE, cancelled, started


def test_a_lock_is_exclusive_per_key(store: Store) -> None:
    a, b = new(store), new(store)
    assert store.lock_holder("signer-1") is None
    assert store.acquire_lock("signer-1", a) == a
    assert store.acquire_lock("signer-1", b) == a  # taken: the holder, not b
    assert store.acquire_lock("signer-1", a) == a  # the holder again: still a
    assert store.lock_holder("signer-1") == a
    assert store.acquire_lock("signer-2", b) == b  # another key is another lock
    assert store.lock_holder("signer-2") == b


def test_only_the_holder_releases_a_lock(store: Store) -> None:
    a, b = new(store), new(store)
    store.acquire_lock("k", a)
    assert store.release_locks(b, key="k") == 0
    assert store.release_locks(b) == 0
    assert store.lock_holder("k") == a
    assert store.release_locks(a, key="k") == 1
    assert store.lock_holder("k") is None
    assert store.release_locks(a, key="k") == 0  # once
    assert store.acquire_lock("k", b) == b


def test_releasing_without_a_key_releases_every_lock_of_the_instance(store: Store) -> None:
    a, b = new(store), new(store)
    for key in ("k1", "k2"):
        store.acquire_lock(key, a)
    store.acquire_lock("k3", b)
    assert store.release_locks(a) == 2
    assert (store.lock_holder("k1"), store.lock_holder("k2")) == (None, None)
    assert store.lock_holder("k3") == b


def test_a_release_makes_the_waiters_task_due(store: Store) -> None:
    holder = new(store, type_="c.holder.v1")
    waiter = new(store, delay=3600)  # parked: due only when woken
    store.acquire_lock("k", holder)
    assert store.acquire_lock("k", waiter) == holder  # registered as a waiter
    assert store.claim(worker="w", types=[TYPE], lease=300) == []
    store.release_locks(holder, key="k")
    [claim] = store.claim(worker="w", types=[TYPE], lease=300)
    assert claim.instance.id == waiter
    assert store.acquire_lock("k", waiter) == waiter


def test_an_instance_that_ends_releases_its_locks_and_wakes_its_waiters(store: Store) -> None:
    claim = started(store, type_="c.holder.v1")
    holder = claim.instance.id
    waiter = new(store, delay=3600)
    store.acquire_lock("k", holder)
    store.acquire_lock("k", waiter)
    d = decide.cancel(claim.instance.projection(in_flight=True), leased=False)  # Finish
    store.apply(Commit(holder, claim.instance.version, d, "w"))
    assert store.lock_holder("k") is None
    [woken] = store.claim(worker="w", types=[TYPE], lease=300)
    assert woken.instance.id == waiter


def test_a_release_wakes_one_waiter_the_longest_waiting_one_no_runner_holds(
    store: Store,
) -> None:
    holder = new(store, type_="c.holder.v1")
    waiters = [new(store, delay=3600) for _ in range(3)]  # parked: due only when woken
    store.acquire_lock("k", holder)
    for w in waiters:
        assert store.acquire_lock("k", w) == holder
        time.sleep(0.002)  # distinct queueing times: the order is theirs
    store.release_locks(holder, key="k")
    [first] = store.claim(worker="w", types=[TYPE], lease=300, limit=10)
    assert first.instance.id == waiters[0]  # one, not a herd of three

    # The woken waiter ends without taking the lock: it passes the wake-up on.
    d = decide.cancel(first.instance.projection(in_flight=True), leased=False)
    store.apply(Commit(waiters[0], first.instance.version, d, "w"))
    [second] = store.claim(worker="w", types=[TYPE], lease=300, limit=10)
    assert second.instance.id == waiters[1]

    # A waiter a runner holds right now is skipped: it is inside its step and asks itself.
    other = new(store, type_="c.holder.v1")
    assert store.acquire_lock("k", other) == other
    store.release_locks(other, key="k")
    [third] = store.claim(worker="w", types=[TYPE], lease=300, limit=10)
    assert third.instance.id == waiters[2]
    assert store.claim(worker="w", types=[TYPE], lease=300, limit=10) == []


def test_an_ending_holder_wakes_one_waiter_of_each_lock(store: Store) -> None:
    claim = started(store, type_="c.holder.v1")
    holder = claim.instance.id
    store.acquire_lock("k1", holder)
    store.acquire_lock("k2", holder)
    on_k1 = [new(store, delay=3600) for _ in range(2)]
    on_k2 = new(store, delay=3600)
    for w in on_k1:
        store.acquire_lock("k1", w)
        time.sleep(0.002)
    store.acquire_lock("k2", on_k2)
    d = decide.cancel(claim.instance.projection(in_flight=True), leased=False)
    store.apply(Commit(holder, claim.instance.version, d, "w"))
    woken = store.claim(worker="w", types=[TYPE], lease=300, limit=10)
    assert sorted(c.instance.id for c in woken) == sorted([on_k1[0], on_k2])


def test_locks_lists_the_held_locks_with_their_live_waiters(store: Store) -> None:
    a, b, c, d = (new(store) for _ in range(4))
    assert store.locks() == []
    store.acquire_lock("eth:1:0xaa", a)
    store.acquire_lock("eth:1:0xaa", b)  # waits
    store.acquire_lock("eth:1:0xaa", c)  # waits, after b
    store.acquire_lock("other_%", d)
    held = store.locks(prefix="eth:")
    assert [(x.key, x.holder, x.waiters) for x in held] == [("eth:1:0xaa", a, (b, c))]
    assert held[0].since > 0
    b_since, c_since = held[0].waiting_since  # when each began to wait, in their order
    assert held[0].since <= b_since <= c_since <= time.time()
    assert [x.key for x in store.locks()] == ["eth:1:0xaa", "other_%"]
    assert store.locks(prefix="other_") == store.locks(prefix="other_%")  # literal _, %
    assert store.locks(prefix="otherX") == []
    cancelled(store, b)  # an ended waiter is no longer listed
    assert store.locks(prefix="eth:")[0].waiters == (c,)
    store.release_locks(a)
    assert store.locks(prefix="eth:") == []  # free: nobody holds it (c is woken to take it)


def test_a_lock_holders_due_task_is_claimed_before_earlier_and_higher_priority_work(
    store: Store,
) -> None:
    others = [new(store, priority=1) for _ in range(3)]  # due first, and a higher priority
    holder = new(store)
    store.acquire_lock("eth:1:0xaa", holder)
    [first] = store.claim(worker="w", types=[TYPE], lease=300, limit=1)
    assert first.instance.id == holder
    rest = store.claim(worker="w", types=[TYPE], lease=300, limit=10)
    assert [c.instance.id for c in rest] == others  # then by priority and due time, once
    assert store.claim(worker="w", types=[TYPE], lease=300, limit=10) == []


def test_the_holders_first_claim_still_takes_limit_tasks_and_each_once(store: Store) -> None:
    others = [new(store) for _ in range(3)]
    holders = [new(store) for _ in range(2)]  # due after the others
    for n, holder in enumerate(holders):
        store.acquire_lock(f"k{n}", holder)
        store.acquire_lock(f"j{n}", holder)  # two locks: still one task
    claims = store.claim(worker="w", types=[TYPE], lease=300, limit=4)
    assert sorted(c.instance.id for c in claims) == sorted([*holders, *others[:2]])
    [last] = store.claim(worker="w", types=[TYPE], lease=300, limit=4)
    assert last.instance.id == others[2]
