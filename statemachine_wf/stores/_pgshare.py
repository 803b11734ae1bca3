"""A runner's share of a PostgreSQL store's pool (``runner_connections``).

A runner's worker threads (marked by ``core/workers.py``) hold at most ``size`` of the
pool's connections at once; every other thread's call (a start, a signal, a read, the
heartbeat) takes the pool as before, and never waits behind the runner's statements.
Fewer of those under way at once is also larger groups and fewer backends on the
server's cores (docs/architecture.md, "The runner's share of the pool").
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from psycopg_pool import PoolTimeout

from ..core.workers import in_worker_thread


def timed_out(seconds: float) -> PoolTimeout:
    """A gate's wait that ran out, as the pool's own wait would end."""
    return PoolTimeout(f"couldn't get a connection after {seconds:.2f} sec")


class Share:
    """The worker threads' share: ``size`` of ``pool_size`` (none needed at the pool's
    size or more: ``size`` is then the pool's)."""

    def __init__(self, size: int, pool_size: int, timeout: float) -> None:
        if size < 1:
            raise ValueError(f"runner_connections must be >= 1, got {size}")
        self.size = min(size, pool_size)
        self._gate = threading.BoundedSemaphore(size) if size < pool_size else None
        self._timeout = timeout
        self._holding = threading.local()

    @contextmanager
    def held(self, gated: bool) -> Iterator[None]:
        """Around a call's connection: a worker thread's holds one of the share (a DAG
        node's commit, ungated, apart); a call it makes meanwhile on another connection
        is under the same one, so a worker never waits for itself."""
        gate = self._gate
        if gate is None or not gated or getattr(self._holding, "on", False):
            yield
            return
        if not in_worker_thread():  # a start, a signal, a read: the whole pool
            yield
            return
        if not gate.acquire(timeout=self._timeout):
            raise timed_out(self._timeout)
        self._holding.on = True
        try:
            yield
        finally:
            self._holding.on = False
            gate.release()
