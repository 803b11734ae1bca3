"""The SQLite store's queue of writing processes: an ``flock`` on a file beside the database.

SQLite has no blocking write lock. A process whose ``BEGIN IMMEDIATE`` finds another
process writing gets SQLITE_BUSY, and the busy handler behind ``busy_timeout`` retries after
sleeps of 1, 2, 5, 10, 15, 20, 25 ms and up: the file stands idle while the sleeper waits
on, though the writer before it finished long ago. Runners in several processes on one file
left the machine about half idle so (bench/README.md, "SQLite: processes queue on a file
lock").

So each process's writing transaction (a group commit: see ``_sqliteconn``) first takes an
exclusive ``flock`` on ``<database>-swf.lock`` and gives it back after its COMMIT or
ROLLBACK. The kernel hands the lock to the next waiting process at once. It is only a
queue: SQLite's own locks still guard the data, and a writer that does not take the flock
(the ``sqlite3`` shell, another program) is met by the busy handler as before. Where
``flock`` is missing (Windows), or the file cannot be opened (a read-only directory, another
user's file), the store goes without it and the busy handler alone queues the processes.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import weakref
from contextlib import suppress

from ..errors import StoreError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("statemachine_wf.sqlite")


class _Turn:
    """One wait for the lock, made by the store's waiter thread for a writer that may
    give up on it."""

    __slots__ = ("abandoned", "fd", "got", "lock")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.got = threading.Event()
        self.lock = threading.Lock()
        self.abandoned = False


class WriterQueue:
    """The ``flock`` of one store: ``take`` returns once this process is the file's
    writer, ``give`` lets the next one in.

    ``take`` keeps ``busy_timeout``'s promise: a writer waits at most ``timeout`` seconds
    for another process's write, then fails (StoreError), as SQLite's busy handler made it
    fail. A blocking ``flock`` has no timeout, so a contended take waits in a thread of the
    store's (the uncontended one takes the lock at once, with no thread involved); a take
    that gave up leaves that thread to let go of the lock as soon as it gets it.
    """

    IDLE = 60.0
    """Seconds the waiter thread waits for a turn before it ends."""

    def __init__(self, database: str, timeout: float) -> None:
        self.path = f"{database}-swf.lock"
        self.timeout = timeout
        self._fd: int | None = None
        self._off = fcntl is None or database in ("", ":memory:")
        self._turns: queue.SimpleQueue[_Turn] | None = None  # the waiter thread's
        self._turns_lock = threading.Lock()
        if not self._off:
            _OPEN.add(self)  # weakly: a forked child lets go of its descriptor

    def take(self) -> None:
        fd = self._open()
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass  # another process writes: wait for it
        except OSError as exc:  # no locks on this file system (ENOLCK): go without
            self._give_up(exc)
            return
        turn = _Turn(fd)
        self._post(turn)
        if turn.got.wait(self.timeout):
            return
        with turn.lock:
            if turn.got.is_set():  # got it just now
                return
            turn.abandoned = True
        raise StoreError(
            f"sqlite: database is locked: another process held its write for over "
            f"{self.timeout:g} s ({self.path})"
        )

    def give(self) -> None:
        if self._fd is not None:
            with suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # gives the lock back, if held

    def forked(self) -> None:
        """In a child, right after ``fork``: let go of the parent's descriptor.

        It shares the parent's open file description, and with it the parent's lock: kept
        open, it would keep the lock of a parent killed mid-write held for as long as the
        child lives. Closing it does not release the lock while the parent holds its own.
        The waiter thread and its lock are the parent's too. The child opens its own on
        its first write.
        """
        fd, self._fd = self._fd, None
        if fd is not None:
            with suppress(OSError):
                os.close(fd)
        self._turns, self._turns_lock = None, threading.Lock()

    def _open(self) -> int | None:
        if self._off:
            return None
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o644)
            except OSError as exc:  # a read-only directory, another user's file
                self._give_up(exc)
                return None
        return self._fd

    def _post(self, turn: _Turn) -> None:
        # Under the lock the waiter ends under: a turn is never left in a queue whose
        # thread has just decided to end.
        with self._turns_lock:
            if self._turns is None:
                self._turns = queue.SimpleQueue()
                threading.Thread(
                    target=self._wait, args=(self._turns,), name="swf-sqlite-lock", daemon=True
                ).start()
            self._turns.put(turn)

    def _wait(self, turns: queue.SimpleQueue[_Turn]) -> None:
        """The waiter thread: take the lock for each turn in order (blocking, without the
        GIL) and hand it over, or give it back at once when its writer gave up meanwhile.
        (Until it does, a take of this process finds it held by its own file description
        and goes in: a lapse of the queue, not of the data, which SQLite's locks guard.)
        It ends after ``IDLE`` seconds without turns; the next contended take starts
        another."""
        while True:
            try:
                turn = turns.get(timeout=self.IDLE)
            except queue.Empty:
                with self._turns_lock:
                    if turns.empty():
                        if self._turns is turns:
                            self._turns = None
                        return
                continue
            try:
                fcntl.flock(turn.fd, fcntl.LOCK_EX)
            except OSError:  # the store closed the file under the wait
                continue
            with turn.lock:
                if not turn.abandoned:
                    turn.got.set()
                    continue
            with suppress(OSError):
                fcntl.flock(turn.fd, fcntl.LOCK_UN)

    def _give_up(self, exc: OSError) -> None:
        self._off = True
        log.info("sqlite: writers queue on the busy handler alone (%s: %s)", self.path, exc)


_OPEN: weakref.WeakSet[WriterQueue] = weakref.WeakSet()
"""Every live queue of this process, for the one at-fork hook below (a hook per queue
would pile up for the life of the process: there is no unregistering one)."""


def _after_fork_in_child() -> None:
    for writers in list(_OPEN):
        writers.forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
