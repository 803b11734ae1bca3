"""The PostgreSQL store's health: one WARNING when the database goes away, one when back."""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("statemachine_wf.postgres")


class Health:
    """One WARNING when the database goes away and one when it is back, per store.

    Back means a call succeeded on a connection opened after the outage began: after a
    crash of the postmaster its old backends die one by one, and a call that one of them
    still answers says nothing about the database.
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self._lock = threading.Lock()
        self.down_since: float | None = None
        self.down_epoch = 0

    def lost(self, reason: object, epoch: int) -> None:
        with self._lock:
            if self.down_since is not None:
                return
            self.down_since = time.monotonic()
            self.down_epoch = epoch
        log.warning("database %s unavailable (%s); retrying until it is back", self.where, reason)

    def ok(self, born: int) -> bool:
        """A call succeeded on a connection opened at epoch ``born``; True if it is back."""
        if self.down_since is None:  # the common case: no lock
            return False
        with self._lock:
            since = self.down_since
            if since is None or born < self.down_epoch:
                return False
            self.down_since = None
        log.warning("database %s is back after %.1f s", self.where, time.monotonic() - since)
        return True
