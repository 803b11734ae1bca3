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
    __slots__ = ("done", "item", "key", "outcome", "turn")

    def __init__(self, key: str, item: T) -> None:
        self.key = key
        self.item = item
        self.done = False
        self.outcome: R | BaseException | None = None
        # Held from the start: its submitter blocks on it until another thread releases
        # it, once, to say "your outcome is in" or "send the next batch".
        self.turn = threading.Lock()
        self.turn.acquire()


class Group(Generic[T, R]):
    """Items submitted by many threads, sent by one of them as a batch.

    ``send(items)`` runs on the sending thread and returns one outcome an item, in
    order: a result, or the exception that item's submitter raises. An exception out of
    ``send`` itself is every item's outcome; if the sending thread is interrupted
    (KeyboardInterrupt), the others raise ``interrupted(exc)``: what was written is not
    known. Items with the same key never share a batch (a later one waits for the next),
    and a batch holds at most ``most`` items.

    Each waiting submitter is woken alone, by its own lock: when its outcome is in, or
    when it is its turn to send what is queued. (A condition's ``notify_all`` woke every
    waiter after each batch, to find most of them still queued: 8% of a runner's CPU.)
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
        self._lock = threading.Lock()
        self._queued: list[_Entry[T, R]] = []
        self._sending = False  # a thread is sending, or has been woken to send next

    def submit(self, key: str, item: T) -> R:
        """Send ``item`` (alone, or with the items queued meanwhile); its outcome."""
        entry: _Entry[T, R] = _Entry(key, item)
        with self._lock:
            self._queued.append(entry)
            # Nobody sends: this thread does. Else it waits until its outcome is in, or
            # until the sender before it hands it the next batch to send.
            mine = not self._sending
            self._sending = True
        if not mine:
            entry.turn.acquire()
        while not entry.done:
            # This thread's turn: everything queued (its own entry, unless its key was
            # taken or the batch full: then round again, still the sender).
            with self._lock:
                batch = self._take()
            self._run(batch, entry)
        if isinstance(entry.outcome, BaseException):
            raise entry.outcome
        return entry.outcome  # type: ignore[return-value]  # done: an R

    def _take(self) -> list[_Entry[T, R]]:
        """The next batch, off the queue (call holding the lock): the oldest entries, one
        a key, at most ``most``."""
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
        return batch

    def _run(self, batch: list[_Entry[T, R]], own: _Entry[T, R]) -> None:
        """Send ``batch`` and hand each entry its outcome, waking its submitter (``own``,
        this thread's, excepted: it is awake). Then the turn to send: this thread's again
        while its own entry waits, else the oldest queued entry's submitter's, or nobody's
        until the next submit."""
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
        nxt: _Entry[T, R] | None = None
        with self._lock:
            for entry, outcome in zip(batch, outcomes, strict=True):
                entry.outcome = outcome
                entry.done = True
            if own.done:
                nxt = self._queued[0] if self._queued else None
                self._sending = nxt is not None
        for entry in batch:
            if entry is not own:
                entry.turn.release()
        if nxt is not None:
            nxt.turn.release()  # it takes the next batch, its own entry first
        if interrupted is not None:
            raise interrupted
