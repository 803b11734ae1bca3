"""Whether the current thread is a runner's worker.

A runner marks its worker threads (:func:`worker_thread`); a store may treat their calls
apart from the process's others. PostgreSQL's keeps them to ``runner_connections`` of its
pool, so that a start, a signal or a read made elsewhere in the process never waits
behind the runner's statements (docs/architecture.md, "The runner's share of the pool").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_local = threading.local()


@contextmanager
def worker_thread() -> Iterator[None]:
    """Mark the current thread as a runner's worker for the block."""
    before = getattr(_local, "worker", False)
    _local.worker = True
    try:
        yield
    finally:
        _local.worker = before


def in_worker_thread() -> bool:
    """Whether the current thread is inside :func:`worker_thread`."""
    return bool(getattr(_local, "worker", False))


def as_worker(loop: Callable[[], None]) -> Callable[[], None]:
    """``loop`` run as a runner's worker (a thread's target)."""

    def work() -> None:
        with worker_thread():
            loop()

    return work
