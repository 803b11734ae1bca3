"""A stand-in for an external payment provider, with its own ledger in its own SQLite file.

It is the *outside world* of the payout example: the workflow cannot see its ledger except
through its API, exactly as with a real bank. Transfers are idempotent on a reference the
caller chooses (as real payment APIs are on an idempotency key), and ``find_transfer`` is
what a reconcile hook asks after a crash.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid


class BankUnavailable(Exception):
    """The bank did not answer (transient: retry)."""


class AccountClosed(Exception):
    """The destination account is closed (permanent: fail)."""


class Bank:
    """A tiny payment provider.

    Args:
        path: its ledger file.
        flaky_first_calls: for a reference in this set, the first transfer call fails with
            ``BankUnavailable`` (to show retries with backoff).
    """

    def __init__(self, path: str, *, flaky_first_calls: frozenset[str] = frozenset()) -> None:
        self.path = path
        self._flaky = set(flaky_first_calls)
        self._lock = threading.Lock()
        with self._db() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS transfers (ref TEXT PRIMARY KEY, account TEXT, "
                "amount_cents INTEGER, confirmation TEXT)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS holds (key TEXT PRIMARY KEY, account TEXT, "
                "amount_cents INTEGER, hold_id TEXT)"
            )

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def hold(self, key: str, account: str, amount_cents: int) -> str:
        """Reserve funds; the same key returns the same hold."""
        if account.startswith("closed-"):
            raise AccountClosed(f"account {account} is closed")
        with self._lock, self._db() as db:
            db.execute(
                "INSERT OR IGNORE INTO holds VALUES (?, ?, ?, ?)",
                (key, account, amount_cents, f"hold_{uuid.uuid4().hex[:10]}"),
            )
            return str(db.execute("SELECT hold_id FROM holds WHERE key = ?", (key,)).fetchone()[0])

    def transfer(self, ref: str, account: str, amount_cents: int) -> str:
        """Move money once per ``ref``; a repeat returns the first confirmation."""
        with self._lock:
            if ref in self._flaky:
                self._flaky.discard(ref)
                raise BankUnavailable("bank timed out")
            with self._db() as db:
                db.execute(
                    "INSERT OR IGNORE INTO transfers VALUES (?, ?, ?, ?)",
                    (ref, account, amount_cents, f"conf_{uuid.uuid4().hex[:10]}"),
                )
                row = db.execute(
                    "SELECT confirmation FROM transfers WHERE ref = ?", (ref,)
                ).fetchone()
                return str(row[0])

    def find_transfer(self, ref: str) -> str | None:
        """The confirmation of a transfer, or None if the bank never saw it."""
        with self._db() as db:
            row = db.execute("SELECT confirmation FROM transfers WHERE ref = ?", (ref,)).fetchone()
            return None if row is None else str(row[0])

    def transfers(self) -> list[tuple[str, str, int]]:
        with self._db() as db:
            return [
                (r[0], r[1], int(r[2]))
                for r in db.execute("SELECT ref, account, amount_cents FROM transfers ORDER BY ref")
            ]
