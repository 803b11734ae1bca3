"""New head blocks, watched once per client: the await step is woken by a block, not a timer.

A transaction in the pool is mined, if at all, in the next block; one mined but not yet
deep enough gets deeper only with new blocks. So a step waiting on either has nothing to
look at until the head moves, and then should look at once. Each waiting instance polling
its receipt every ``poll_interval`` seconds costs a claim, two or three JSON-RPC calls and
a commit per poll (four to five polls a transaction at 1 s blocks and a 0.2 s poll), and
still sees the block up to a poll late.

Instead the step registers ``ctx.waker()`` here with the head it has seen, and snoozes as
before: :class:`HeadWatcher` asks the node for the head number once every ``interval``
seconds (one call for every waiting instance of the process) and, when the head has
moved past a registration, calls its waker, which makes the instance due at once. The
snooze's own end stays the safety net: a node that cannot be asked, a watcher stopped, a
wake-up the database did not take.

The thread starts on the first registration and sleeps, asking nothing, while nobody
waits; :meth:`HeadWatcher.close` (``EthereumClient.close``) stops it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .errors import ChainError

if TYPE_CHECKING:
    from .client import EthereumClient

__all__ = ["HeadWatcher"]

log = logging.getLogger(__name__)


class HeadWatcher:
    """Calls each registered waker once the node's head is past the head it was given.

    Args:
        client: The node whose head is watched (``block_number``).
        interval: Seconds between two questions while somebody waits.
    """

    def __init__(self, client: EthereumClient, interval: float) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0")
        self._client = client
        self.interval = interval
        self._cond = threading.Condition()
        self._waiting: list[tuple[int, Callable[[], None]]] = []
        self._thread: threading.Thread | None = None
        self._closed = False

    def after(self, head: int, wake: Callable[[], None]) -> None:
        """Call ``wake`` (once) when the head is above ``head``: at most ``interval`` late.

        ``head`` is what the caller saw *before* it looked at its transaction, so a block
        that came in between wakes it at the next question instead of a block later.
        """
        with self._cond:
            if self._closed:
                return
            asleep = not self._waiting  # the thread waits for a first registration
            self._waiting.append((head, wake))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="swf-eth-heads", daemon=True)
                self._thread.start()
            elif asleep:
                self._cond.notify()

    @property
    def waiting(self) -> int:
        """How many wakers wait for a new head."""
        with self._cond:
            return len(self._waiting)

    def close(self) -> None:
        """Stop the thread; wakers still registered are dropped (their snoozes end)."""
        with self._cond:
            self._closed = True
            self._waiting.clear()
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                # Asleep, asking nothing, while nobody waits.
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
            try:
                head = self._client.block_number()
            except ChainError as exc:  # the snoozes' own end covers an outage
                log.debug("head watcher: %s", exc)
                head = None
            except Exception:  # never let the thread die: the next question may answer
                log.exception("head watcher: the head could not be read")
                head = None
            due: list[Callable[[], None]] = []
            with self._cond:
                if head is not None:
                    due = [wake for seen, wake in self._waiting if head > seen]
                    self._waiting = [(s, w) for s, w in self._waiting if head <= s]
                if self._closed:
                    return
            for wake in due:
                try:
                    wake()
                except Exception:  # one waker's failure must not starve the others
                    log.exception("head watcher: a wake-up failed")
            with self._cond:
                if not self._closed:
                    self._cond.wait(self.interval)
