"""Live updates: an instance's events as they are committed, as an async iterator.

::

    async for update in watch(store, instance_id):
        print(update.seq, update.node, update.event_type, update.status)

Nothing here polls in a loop. A store wakes its watchers when an instance's log grows
(:meth:`Store.live_hub`): the SQLite store from its own commit path, and from its
``PRAGMA data_version`` watcher for other processes' commits; the Postgres store from a
LISTEN connection, on the notification that migration 008's trigger sends with every
statement that appends events, in whichever process. A woken watcher re-reads the log
after the last seq it has seen, so a notification that is lost, merged with another or
spurious costs a re-read at most, never an event. For what no notification can announce
(a notification lost across a reconnect it did not notice, a deleted test run) every
watcher also re-reads after ``resync`` seconds without a wake-up.

Order: each instance's events are appended under its row lock (Postgres; SQLite writes
one transaction at a time), so they commit in seq order and a re-read "after seq s" can
never miss an event below s that commits later.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..core.fold import Projection
from ..core.fold import apply as fold_apply
from ..core.store import Store
from ..definition.events import Ev, EventRecord, Status
from ..errors import InvalidState, NotFound
from ..runtime.operations import engine_of

DEFAULT_RESYNC = 5.0
"""Seconds a watcher waits for a wake-up before it re-reads anyway."""


@dataclass(frozen=True, slots=True)
class Update:
    """One event of the instance's log, and the instance's status once it is applied."""

    event: EventRecord
    status: Status

    @property
    def instance_id(self) -> str:
        return self.event.instance_id

    @property
    def seq(self) -> int:
        return self.event.seq

    @property
    def node(self) -> str | None:
        """The DAG node or state-machine step; None for an instance event."""
        return self.event.node

    @property
    def event_type(self) -> str:
        return self.event.event_type

    @property
    def payload(self) -> dict[str, Any]:
        return self.event.payload

    @property
    def error(self) -> dict[str, Any] | None:
        return self.event.error

    @property
    def terminal(self) -> bool:
        """The instance has ended with this event (COMPLETED, FAILED or CANCELLED)."""
        return self.status.terminal


def status_after(status: Status, event: EventRecord, *, kind: str) -> Status:
    """The instance status once ``event`` is applied (the fold's, plus the DAG's own)."""
    if event.event_type == Ev.CREATED:
        try:
            return engine_of(kind).created
        except InvalidState:
            # Refused by the database since migration 012; a row written before it is
            # shown, never run.
            return Status.PENDING
    if event.event_type == Ev.FAILED:
        return Status.FAILED
    return fold_apply(Projection(status=status), event).status


async def watch(
    store: Store,
    instance_id: str,
    *,
    after_seq: int = 0,
    resync: float = DEFAULT_RESYNC,
) -> AsyncIterator[Update]:
    """Yield the instance's events with seq > ``after_seq`` in log order, as committed.

    Ends after the event that makes the instance terminal (at once if it already was at
    ``after_seq`` and nothing followed). A watcher that restarts with the last seq it
    handled as ``after_seq`` gets every later event exactly once.

    Args:
        store: any store; other processes' commits are seen too.
        instance_id: a state-machine or DAG instance.
        after_seq: replay from after this seq (0: the whole log).
        resync: seconds without a wake-up after which the log is re-read anyway.

    Raises:
        NotFound: no such instance (also if it is deleted while watched, e.g. a stopped
            test run).
        ValueError: a negative ``after_seq`` or a non-positive ``resync``.
    """
    if after_seq < 0:
        raise ValueError(f"after_seq must be >= 0, got {after_seq}")
    if resync <= 0:
        raise ValueError(f"resync must be > 0, got {resync}")
    hub = store.live_hub()
    # Listen first, read second: a commit after the read is then always announced.
    sub = await asyncio.to_thread(hub.subscribe, instance_id, asyncio.get_running_loop())
    try:
        record = await asyncio.to_thread(store.get, instance_id)
        if record is None:
            raise NotFound(f"no workflow instance {instance_id!r}")
        # From seq 0 whatever after_seq says: an update's status is the fold of every
        # event before it, so the replayed ones are read and folded, only not yielded.
        kind, status, last = record.kind, Status.PENDING, 0
        while True:
            # Cleared before the read, not after: a commit announced while the read runs
            # leaves the event set, and the next wait returns at once to read it.
            sub.event.clear()
            events = await asyncio.to_thread(store.events, instance_id, after_seq=last)
            # Asked only when nothing came: a deleted instance reads as an empty tail,
            # and a read per wake-up would be one too many while events flow.
            if not events and await asyncio.to_thread(store.get, instance_id) is None:
                raise NotFound(f"workflow instance {instance_id!r} was deleted")
            for event in events:
                status = status_after(status, event, kind=kind)
                # Noted on the subscription too: the late notification of a commit this
                # read already returned is then skipped, not read again.
                last = sub.seen = event.seq
                if event.seq > after_seq:
                    yield Update(event, status)
            if status.terminal:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sub.event.wait(), timeout=resync)
    finally:
        sub.close()
