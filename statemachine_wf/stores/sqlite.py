"""The SQLite store: zero setup, one machine, several processes.

WAL journal, ``BEGIN IMMEDIATE`` for every write (the writer lock is taken up front, so
two writers never deadlock on an upgrade), ``busy_timeout`` for waiting on it, and
``synchronous=FULL`` by default so a commit survives power loss. Each thread reads on its
own connection; the writes of the process share one, and those queued behind each other
share a COMMIT (group commit), each returning once it is durable. Waiting runners wake on
an in-process condition when this process adds work, and notice other processes' commits
through ``PRAGMA data_version``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from ..core.store import DagSnapshot, NewInstance
from ..core.waits import NewSignal
from ..definition.limits import DEFAULT_MAX_PAYLOAD_BYTES
from ..errors import InvalidState, NotFound, PayloadTooLarge, StoreError
from ._common import dumps, key_clash
from ._sqliteconn import Q, SQLiteConnections

_INSTANCE_AFTER = "swf_instance_after"
"""The claim's column after which its instance's columns come."""


class SQLiteStore(SQLiteConnections):
    """A :class:`~statemachine_wf.core.store.Store` on one SQLite file (its connections are
    :class:`~statemachine_wf.stores._sqliteconn.SQLiteConnections`)."""

    dialect = "sqlite"
    json_decoded = False  # JSON columns are TEXT: decoded by the records
    dag_group_most = 32  # a group's or a run's completions in one commit (runtime/dag_group.py)

    # -- decisions ------------------------------------------------------------------------
    def _head(self, moves: bool) -> str:
        return "apply_head_moved" if moves else "apply_head"  # see queries.sql

    # -- producers --------------------------------------------------------------------
    def _create_batch(self, news: Sequence[NewInstance]) -> list[tuple[str, bool]]:
        self._starts += 1
        # The create script per item, in one transaction: a key already taken (stored, or
        # earlier in this batch) inserts nothing and yields the id that holds it.
        now = time.time()
        out: list[tuple[str, bool]] = []
        with self._write() as conn:
            for new in news:
                params = {**self._create_params(new), "now": now}
                if self._run(conn, "create", params).fetchone() is not None:
                    out.append((new.id, True))
                    continue
                row = conn.execute(Q["instance_by_key"], {"key": new.idempotency_key}).fetchone()
                # Raised inside the write: it is rolled back (to its savepoint, or with
                # the transaction it opened), so the items of this batch created before
                # it go too.
                if row["type"] != new.type:  # a stored key of another type: refuse the batch
                    raise key_clash(new.idempotency_key or "", row["id"], row["type"], new.type)
                out.append((str(row["id"]), False))
        return out

    # -- signals and timers ---------------------------------------------------------------
    def _signal_refusal(self, exc: StoreError, new: NewSignal) -> Exception | None:
        # The trigger's refusals (sql/sqlite/005_signals.sql), told apart by their text.
        text = str(exc)
        if "no such workflow instance" in text:
            return NotFound(f"no workflow instance {new.instance_id!r}")
        if "has ended" in text:
            return InvalidState(
                f"workflow instance {new.instance_id} has ended; it takes no more signals"
            )
        if "payload over the limit" in text:
            # The limit in wf_settings (migration 006) is below this process's.
            size = len(dumps(new.payload).encode())
            return PayloadTooLarge(f"signal {new.name!r} payload", size, self._max_payload_bytes())
        return None

    def _max_payload_bytes(self) -> int:
        row = self._read_one("get_setting", name="max_payload_bytes")
        return DEFAULT_MAX_PAYLOAD_BYTES if row is None else int(row["value"])

    # -- DAG instances --------------------------------------------------------------------
    def _claimed_instance(
        self, conn: sqlite3.Connection, row: sqlite3.Row
    ) -> sqlite3.Row | dict[str, Any] | None:
        # Read as columns inside the claim's transaction (see SqlStore._claimed_instance).
        # The claim's own result carries them, after its marker column (queries.sql,
        # `claim`); a start's or a DAG claim's row is followed by a read.
        names = row.keys()
        if _INSTANCE_AFTER in names:
            first = names.index(_INSTANCE_AFTER) + 1
            return dict(zip(names[first:], row[first:], strict=True))
        return self._run(conn, "get_instance", {"id": row["instance_id"]}).fetchone()

    def _claimed_signals(self, conn: sqlite3.Connection, row: sqlite3.Row, instance: Any) -> Any:
        # Read in the claim's transaction (see SqlStore._claimed_signals).
        if row["fired"] is not None:
            return self._run(conn, "signal_get", {"id": row["fired"]}).fetchall()
        if instance is None or instance["waiting_key"] is None or row["started"]:
            return None
        return self._run(
            conn, "signals_pending", self._params(instance_id=row["instance_id"])
        ).fetchall()

    def dag_snapshot(self, instance_id: str, *, after_seq: int = 0) -> DagSnapshot | None:
        # The version is read first: anything committed after it that matters bumps it,
        # so the CAS of a decision made on this snapshot fails rather than misleads.
        inst = self.get(instance_id)
        if inst is None:
            return None
        events = self.events(instance_id, after_seq=after_seq)
        rows = self._read_all("dag_slots", id=instance_id)
        return DagSnapshot(inst, events, tuple(r["slot"] for r in rows))
