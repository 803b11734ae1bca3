"""Live updates on PostgreSQL: one LISTEN connection per store, while anyone watches.

Migration 008 makes every statement that appends events to a *watched* instance (one
registered in ``wf_live_watches``) send ``pg_notify`` on :func:`live_channel` with
``"<instance id> <highest seq>"``, whichever process commits it. This module holds the
listening end: a daemon thread with its own connection (LISTEN
state must not leak into the pool), started by the first subscriber and closed when the
last one leaves, so a process that nobody watches from never receives these
notifications. After a lost connection it reconnects and wakes every subscriber once it
listens again: whatever was committed while it was away is re-read, not lost.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable

import psycopg
from psycopg import sql

from ..errors import StoreError, StoreUnavailable
from ._live import LiveHub, Subscription

log = logging.getLogger("statemachine_wf.postgres.live")

_MAX_IDENT = 63


def live_channel(schema: str) -> str:
    """The channel migration 008's trigger notifies on (computed the same way there)."""
    channel = f"swf_live_{schema}"
    # A channel name is an identifier of at most 63 bytes: LISTEN would cut a longer one
    # and pg_notify refuse it, so a long schema's channel is an md5 of it, chosen exactly
    # as migration 008's trigger chooses it (a schema longer than 54 characters).
    if len(channel) > _MAX_IDENT:
        channel = "swf_live_" + hashlib.md5(schema.encode()).hexdigest()
    return channel


class LiveListener:
    """The LISTEN side of one store's :class:`LiveHub`.

    Args:
        url: the store's connection string.
        channel: :func:`live_channel` of the store's schema.
        register: records a subscription in ``wf_live_watches`` (raises NotFound for an
            unknown instance); ``unregister`` removes it.
        sweep: drops registrations that dead watchers left on ended instances; run
            whenever a LISTEN connection opens.
        connect_timeout: how long the first subscriber waits for LISTEN to be in place.
    """

    def __init__(
        self,
        url: str,
        channel: str,
        *,
        register: Callable[[Subscription], None],
        unregister: Callable[[Subscription], None],
        sweep: Callable[[], None],
        connect_timeout: float = 10.0,
    ) -> None:
        self.url = url
        self.channel = channel
        self.connect_timeout = connect_timeout
        self._sweep = sweep
        self.hub = LiveHub(
            start=self.start, stop=self.stop, register=register, unregister=unregister
        )
        self._thread: threading.Thread | None = None
        self._stopping: threading.Event | None = None
        self._error: BaseException | None = None

    def start(self) -> None:
        """Listen (if not already); return once LISTEN is in place."""
        alive = self._thread is not None and self._thread.is_alive()
        # A thread told to stop may live on for up to a second (it looks at `stopping`
        # between waits for notifications): no subscriber may count on it, so a fresh
        # thread and connection start beside it.
        if alive and self._stopping is not None and not self._stopping.is_set():
            return
        stopping, ready = threading.Event(), threading.Event()
        thread = threading.Thread(
            target=self._run, args=(stopping, ready), name="swf-live-listen", daemon=True
        )
        self._thread, self._stopping, self._error = thread, stopping, None
        thread.start()
        if not ready.wait(self.connect_timeout):
            stopping.set()
            # The database is away (or would not let us LISTEN) for the whole wait: the
            # same as a pool that gives no connection in time.
            raise StoreUnavailable(
                f"live updates: could not LISTEN on postgres: {self._error!r}", lost=False
            )

    def stop(self) -> None:
        """Close the connection (within a second); a later :meth:`start` opens a new one."""
        if self._stopping is not None:
            self._stopping.set()

    def _run(self, stopping: threading.Event, ready: threading.Event) -> None:
        listened = False
        away = False  # one WARNING when the database goes, one INFO when it is back
        while not stopping.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    # Ready once LISTEN is in place, before the sweep: from here on every
                    # commit is announced, which is all a subscriber waits for.
                    ready.set()
                    self._sweep()
                    if listened:
                        self.hub.publish_all()  # commits made while we were not listening
                    if away:
                        log.info("live listener reconnected")
                    listened, away = True, False
                    while not stopping.is_set():
                        for note in conn.notifies(timeout=1.0):
                            self._dispatch(note.payload)
            except (psycopg.Error, StoreError) as exc:
                self._error = exc
                log.log(
                    logging.DEBUG if away else logging.WARNING,
                    "live listener connection lost (%s); reconnecting every second",
                    exc,
                )
                away = True
                self.hub.publish_all()
                stopping.wait(1.0)

    def _dispatch(self, payload: str) -> None:
        instance_id, _, seq = payload.partition(" ")
        if seq.isdigit():
            self.hub.publish(instance_id, int(seq))
        else:
            self.hub.publish_all()  # not ours to parse: re-reading is always safe
