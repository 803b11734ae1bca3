"""The live updates' contract (``ports.LiveUpdates``), on SQLite and PostgreSQL.

A subscription is woken (its ``event`` set) after a commit appends events to its
instance, from this store object or another one on the same database (another process,
as far as the store can tell); the watcher then re-reads the log after the last seq it
saw. Waits are generous (30 s): only that the wake-up comes is asserted, not how fast.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from statemachine_wf.core import decide
from statemachine_wf.core.store import Commit, Store
from statemachine_wf.definition.events import Ev
from statemachine_wf.stores import open_store

from .helpers import started

WOKEN_WITHIN = 30.0


@pytest.fixture
def other(store: Store, store_url: tuple[str, dict[str, str]]) -> Iterator[Store]:
    """A second store object on the same database (what another process would open)."""
    url, options = store_url
    s = open_store(url, **options)
    yield s
    s.close()


def save(store: Store, instance_id: str, n: int) -> None:
    """A commit that appends one PROGRESS_SET to the instance's log."""
    rec = store.get(instance_id)
    assert rec is not None
    d = decide.saved(rec.projection(in_flight=True), "first", 1, {f"k{n}": n})
    store.apply(Commit(instance_id, rec.version, d, "w"))


async def woken_after(store: Store, writer: Store, instance_id: str, commits: int) -> list[int]:
    """Subscribe, commit ``commits`` times through ``writer``, wait for the wake-up and
    return the seqs a re-read after the last seen seq finds."""
    hub = store.live_hub()
    sub = await asyncio.to_thread(hub.subscribe, instance_id, asyncio.get_running_loop())
    try:
        assert hub.active
        seen = store.events(instance_id)
        sub.seen = seen[-1].seq
        sub.event.clear()
        for n in range(commits):
            await asyncio.to_thread(save, writer, instance_id, n)
        await asyncio.wait_for(sub.event.wait(), timeout=WOKEN_WITHIN)
        fresh = await asyncio.to_thread(store.events, instance_id, after_seq=sub.seen)
        assert all(e.event_type == Ev.PROGRESS_SET for e in fresh)
        return [e.seq for e in fresh]
    finally:
        sub.close()


def test_a_commit_wakes_the_subscribers_of_its_instance(store: Store) -> None:
    iid = started(store).instance.id
    seqs = asyncio.run(woken_after(store, store, iid, 3))
    assert len(seqs) == 3  # the wake-up carries nothing; the re-read finds every event
    assert seqs == sorted(seqs)
    assert not store.live_hub().active


def test_another_store_objects_commit_wakes_the_subscriber(store: Store, other: Store) -> None:
    iid = started(store).instance.id
    seqs = asyncio.run(woken_after(store, other, iid, 1))
    assert len(seqs) == 1
    assert not store.live_hub().active


def test_the_hub_is_active_while_anybody_is_subscribed(store: Store) -> None:
    a, b = started(store).instance.id, started(store).instance.id

    async def main() -> None:
        hub = store.live_hub()
        loop = asyncio.get_running_loop()
        assert not hub.active
        first = await asyncio.to_thread(hub.subscribe, a, loop)
        second = await asyncio.to_thread(hub.subscribe, b, loop)
        third = await asyncio.to_thread(hub.subscribe, a, loop)
        for sub in (first, second):
            await asyncio.to_thread(sub.close)
            assert hub.active
        await asyncio.to_thread(third.close)
        assert not hub.active

    asyncio.run(main())


def test_a_subscription_to_a_missing_instance_is_refused(store: Store) -> None:
    from statemachine_wf import NotFound

    hub = store.live_hub()
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(NotFound, match="no workflow instance"):
            hub.subscribe("00000000-0000-4000-8000-000000000000", loop)
    finally:
        loop.close()
    assert not hub.active
