"""The in-process end of live updates: who watches which instance, and waking them.

A store owns one :class:`LiveHub`. Whatever learns that an instance's log grew -- the
SQLite store's own commit path, its watcher of other processes' commits, the Postgres
store's LISTEN connection -- calls :meth:`LiveHub.publish` (or :meth:`LiveHub.publish_all`
when it cannot say which instance). Subscribers are woken, never handed data: they re-read
the log after the last seq they saw, so a wake-up that is lost, merged or spurious costs
at most a re-read and never an event.

Subscribers live on asyncio loops; publishers are store threads. The hub is the only
place the two meet (``call_soon_threadsafe``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Callable


class Subscription:
    """One watcher of one instance: an event its loop can await, set from any thread."""

    def __init__(self, hub: LiveHub, instance_id: str, loop: asyncio.AbstractEventLoop) -> None:
        self.hub = hub
        self.instance_id = instance_id
        self.loop = loop
        self.event = asyncio.Event()
        self.token = str(uuid.uuid4())
        """Names this subscription where the store registers it (Postgres)."""
        self.seen = 0
        """The last seq the watcher has read; a notification at or below it is skipped."""

    def wake(self, seq: int | None) -> None:
        if seq is not None and seq <= self.seen:
            return
        # A closed loop: its watcher is gone and unsubscribes on its way out.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.event.set)

    def close(self) -> None:
        self.hub.unsubscribe(self)


class LiveHub:
    """Subscribers by instance id.

    Args:
        start: called on every :meth:`subscribe`, before it returns: make sure the source
            of notifications runs and is listening (cheap when it already is), so a commit
            after ``subscribe`` returns is never missed.
        stop: called when the last subscriber has left (and none came back meanwhile).
        register: called with each new subscription once ``start`` returned, before
            :meth:`subscribe` does (Postgres: notifications are only sent for instances
            somebody registered); raising aborts the subscription.
        unregister: called with each subscription that ends.
    """

    def __init__(
        self,
        *,
        start: Callable[[], None] | None = None,
        stop: Callable[[], None] | None = None,
        register: Callable[[Subscription], None] | None = None,
        unregister: Callable[[Subscription], None] | None = None,
    ) -> None:
        self._subs: dict[str, set[Subscription]] = {}
        self._count = 0
        self._lock = threading.Lock()
        self._source_lock = threading.Lock()
        self._start = start
        self._stop = stop
        self._register = register
        self._unregister = unregister

    @property
    def active(self) -> bool:
        return self._count > 0

    def subscribe(self, instance_id: str, loop: asyncio.AbstractEventLoop) -> Subscription:
        """Register a watcher; blocks until notifications for it are being listened for."""
        sub = Subscription(self, instance_id, loop)
        # Counted before the source starts: a publish that comes while start() or
        # register() runs already finds this subscription, and a last subscriber leaving
        # meanwhile sees a count above zero and leaves the source running.
        with self._lock:
            self._subs.setdefault(instance_id, set()).add(sub)
            self._count += 1
        try:
            if self._start is not None:
                with self._source_lock:
                    self._start()
            if self._register is not None:
                self._register(sub)
        except BaseException:
            self._remove(sub)
            raise
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        if not self._remove(sub):
            return
        if self._unregister is not None:
            self._unregister(sub)

    def _remove(self, sub: Subscription) -> bool:
        with self._lock:
            subs = self._subs.get(sub.instance_id)
            if subs is None or sub not in subs:
                return False
            subs.discard(sub)
            if not subs:
                del self._subs[sub.instance_id]
            self._count -= 1
        # Stopped only if the count is still zero under the source lock, which start()
        # takes too: a subscriber that came in meanwhile either keeps the source running
        # or starts it afresh after this stop, never finds it stopped under it.
        if self._stop is not None:
            with self._source_lock:
                if self._count == 0:
                    self._stop()
        return True

    def publish(self, instance_id: str, seq: int | None = None) -> None:
        """The log of ``instance_id`` grew (up to ``seq``, when known)."""
        # Read without the lock: a zero that is stale only misses a subscriber whose first
        # read of the log is still to come, and that read sees this commit.
        if not self._count:
            return
        with self._lock:
            subs = list(self._subs.get(instance_id, ()))
        for sub in subs:
            sub.wake(seq)

    def publish_all(self) -> None:
        """Some log may have grown: every subscriber re-reads."""
        if not self._count:
            return
        with self._lock:
            subs = [s for group in self._subs.values() for s in group]
        for sub in subs:
            sub.wake(None)
