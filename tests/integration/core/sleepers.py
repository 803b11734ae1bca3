"""A worker thread asleep in a store's ``wait_for_work``, for the tests of what a start
made in the same process wakes (test_start_kept_local.py, test_start_leased.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from statemachine_wf.core.records import Claimant


def sleeping(store: Any) -> int:
    """How many of ``store``'s worker threads sleep now (its ``Wakeup``)."""
    return int(store._wakeup.sleeping)


def until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


class Sleeper:
    """A worker thread of ``store`` asleep in ``wait_for_work``, claiming ``types`` (as
    ``claimant``, when given, for a start to lease its task to)."""

    def __init__(
        self,
        store: Any,
        types: list[str],
        claimant: Claimant | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.woken: list[tuple[bool, float]] = []
        self._store = store
        self._types = types
        self._claimant = claimant
        self._timeout = timeout
        self._thread = threading.Thread(target=self._sleep, daemon=True)
        self._thread.start()
        until(lambda: sleeping(store) >= 1)

    def _sleep(self) -> None:
        assert self._store.wait_for_work(60)  # a thread's first wait returns at once
        began = time.monotonic()
        woken = self._store.wait_for_work(self._timeout, types=self._types, claimant=self._claimant)
        self.woken.append((woken, began))

    def join(self) -> tuple[bool, float]:
        """Whether it was woken (not timed out), and how long it slept."""
        self._thread.join(60)
        assert not self._thread.is_alive()
        [(woken, began)] = self.woken
        return woken, time.monotonic() - began
