"""SQLite: this process's commits are published to its live watchers by a TEMP trigger on
the write connection that notes each appended event. The trigger is made by the first
live subscription, not with the connection: a process nobody watches pays no call from
SQLite into Python per event, and a watcher still hears of every commit after it
subscribed, with the event's seq. The last subscriber to leave drops it again."""

from __future__ import annotations

import asyncio
import threading

import pytest
from pydantic import BaseModel

from statemachine_wf import COMPLETED, Client, StepContext, Workflow, step
from statemachine_wf.stores.sqlite import SQLiteStore


class In(BaseModel):
    pass


class Once(Workflow[In, In]):
    workflow_type = "t.livenote.v1"

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, In]) -> None:
        return None


@pytest.fixture
def store(sqlite_store: SQLiteStore) -> SQLiteStore:
    return sqlite_store  # tests/plugins/stores.py: a migrated store on tmp_path/swf.db


def published(store: SQLiteStore) -> list[tuple[str, int | None]]:
    """Record the hub's per-instance publications (the trigger's path; the watcher of
    other connections' commits calls publish_all instead)."""
    calls: list[tuple[str, int | None]] = []
    hub = store.live_hub()
    publish = hub.publish

    def record(instance_id: str, seq: int | None = None) -> None:
        calls.append((instance_id, seq))
        publish(instance_id, seq)

    hub.publish = record  # type: ignore[method-assign]
    return calls


def temp_triggers(store: SQLiteStore) -> list[str]:
    """The write connection's TEMP triggers but the claim's own (made with it)."""
    with store._write() as conn:
        rows = conn.execute(
            "SELECT name FROM sqlite_temp_master WHERE type = 'trigger'"
            " AND name <> 'swf_claim_take'"
        )
        return [r[0] for r in rows.fetchall()]


def test_no_note_before_a_subscription_then_every_commit_with_its_seq(
    store: SQLiteStore,
) -> None:
    calls = published(store)
    client = Client(store, [Once])
    before = client.start(Once, In())
    assert calls == []  # nobody watches: no event was noted
    assert temp_triggers(store) == []

    loop = asyncio.new_event_loop()
    try:
        sub = store.live_hub().subscribe(before, loop)
        try:
            assert temp_triggers(store) == ["swf_live_note"]
            after = client.start(Once, In())
            (created,) = store.events(after)
            assert calls == [(after, created.seq)]  # the commit, with its event's seq
            # A commit of the watched instance wakes its subscriber.
            client.cancel(before)
            last = store.events(before)[-1]
            assert calls[-1] == (before, last.seq)
            loop.run_until_complete(asyncio.wait_for(sub.event.wait(), 5))
        finally:
            sub.close()
    finally:
        loop.close()
    # The last subscriber left: the trigger went with it, and nothing more is noted.
    assert temp_triggers(store) == []
    noted = len(calls)
    client.start(Once, In())
    assert len(calls) == noted
    # A second subscription makes it again, and is told of every commit after it.
    loop = asyncio.new_event_loop()
    try:
        first = store.live_hub().subscribe(before, loop)
        second = store.live_hub().subscribe(before, loop)
        assert temp_triggers(store) == ["swf_live_note"]
        first.close()
        assert temp_triggers(store) == ["swf_live_note"]  # one subscriber is still there
        again = client.start(Once, In())
        assert calls[-1] == (again, store.events(again)[-1].seq)
        second.close()
    finally:
        loop.close()
    assert temp_triggers(store) == []


def test_writes_racing_the_first_subscription_are_committed_or_noted(
    store: SQLiteStore,
) -> None:
    # Writers keep committing while a subscription is made: each write either committed
    # before subscribe() returned (so a first read sees it) or was noted after it.
    calls = published(store)
    client = Client(store, [Once])
    stop = threading.Event()
    started: list[str] = []

    def write() -> None:
        while not stop.is_set():
            started.append(client.start(Once, In()))

    threads = [threading.Thread(target=write) for _ in range(3)]
    for t in threads:
        t.start()
    loop = asyncio.new_event_loop()
    try:
        while len(started) < 20:
            stop.wait(0.001)
        sub = store.live_hub().subscribe(started[0], loop)
        seen = {r.id for r in store.list_instances(limit=100_000)}  # the subscriber's first read
        while len(calls) < 20:
            stop.wait(0.001)
        stop.set()
        for t in threads:
            t.join(10)
        sub.close()
    finally:
        stop.set()
        loop.close()
    noted = {instance_id for instance_id, _ in calls}
    assert set(started) <= seen | noted
    assert all(seq is not None for _, seq in calls)
