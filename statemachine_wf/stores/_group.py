"""Writes of several threads sent as one statement: group commit for PostgreSQL.

Each PostgreSQL statement has a fixed cost on the server (its executor's start and end,
its commit, the round trip) that is most of what a small decision costs: one backend
spent about 520 µs on a lone Continue and 180 µs a Continue on four sent together
(bench/README.md, "Session 31"). So a runner's worker threads that commit at the same
moment share one statement, as SQLite's writers share one COMMIT (``_sqliteconn``).

:class:`Group` is how they meet, with nothing of SQL in it. A thread that submits while
no statement of the group is under way sends at once, its own write and whatever is
queued: at low load a write goes alone and waits for nobody. A thread that submits while
one is under way queues, and the next sender takes everything queued. No write waits for
more than the statement ahead of it and its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class _Entry(Generic[T, R]):
    __slots__ = ("done", "item", "key", "outcome")

    def __init__(self, key: str, item: T) -> None:
        self.key = key
        self.item = item
        self.done = False
        self.outcome: R | BaseException | None = None


class Group(Generic[T, R]):
    """Items submitted by many threads, sent by one of them as a batch.

    ``send(items)`` runs on the sending thread and returns one outcome an item, in
    order: a result, or the exception that item's submitter raises. An exception out of
    ``send`` itself is every item's outcome; if the sending thread is interrupted
    (KeyboardInterrupt), the others raise ``interrupted(exc)``: what was written is not
    known. Items with the same key never share a batch (a later one waits for the next),
    and a batch holds at most ``most`` items.
    """

    def __init__(
        self,
        send: Callable[[Sequence[T]], Sequence[R | BaseException]],
        *,
        most: int = 32,
        interrupted: Callable[[BaseException], Exception] = RuntimeError,
    ) -> None:
        if most < 1:
            raise ValueError(f"most must be at least 1, got {most}")
        self._send = send
        self._interrupted = interrupted
        self._most = most
        self._cond = threading.Condition()
        self._queued: list[_Entry[T, R]] = []
        self._sending = False

    def submit(self, key: str, item: T) -> R:
        """Send ``item`` (alone, or with the items queued meanwhile); its outcome."""
        entry: _Entry[T, R] = _Entry(key, item)
        with self._cond:
            self._queued.append(entry)
        while True:
            with self._cond:
                # Wait while another thread sends: either its batch carries this entry,
                # or this thread sends the next one (with what queued up behind it).
                while self._sending and not entry.done:
                    self._cond.wait()
                if entry.done:
                    break
                batch = self._take()
            # A batch without this entry (its key was taken, or the batch was full)
            # is sent all the same, and this thread goes round again for its own.
            self._run(batch)
        if isinstance(entry.outcome, BaseException):
            raise entry.outcome
        return entry.outcome  # type: ignore[return-value]  # done: an R

    def _take(self) -> list[_Entry[T, R]]:
        """The next batch, off the queue (call holding the condition): the oldest entries,
        one a key, at most ``most``; this thread sends it."""
        batch: list[_Entry[T, R]] = []
        keys: set[str] = set()
        rest: list[_Entry[T, R]] = []
        for entry in self._queued:
            if len(batch) < self._most and entry.key not in keys:
                keys.add(entry.key)
                batch.append(entry)
            else:
                rest.append(entry)
        self._queued = rest
        self._sending = True
        return batch

    def _run(self, batch: list[_Entry[T, R]]) -> None:
        outcomes: Sequence[R | BaseException]
        interrupted: BaseException | None = None
        try:
            outcomes = self._send([e.item for e in batch])
            if len(outcomes) != len(batch):
                raise AssertionError(f"{len(outcomes)} outcomes for {len(batch)} items")
        except Exception as exc:  # the statement failed: every item's outcome
            outcomes = [exc] * len(batch)
        except BaseException as exc:  # this thread was interrupted: raised here, and the
            interrupted = exc  # other submitters learn that their outcome is unknown
            outcomes = [self._interrupted(exc)] * len(batch)
        with self._cond:
            for entry, outcome in zip(batch, outcomes, strict=True):
                entry.outcome = outcome
                entry.done = True
            self._sending = False
            # Wake every waiter: those whose outcome is in, and one to send what queued.
            self._cond.notify_all()
        if interrupted is not None:
            raise interrupted
