"""The PostgreSQL store: many processes on many machines.

psycopg 3 with a ``psycopg_pool`` pool of autocommit connections: every decision is one
statement (a chain of data-modifying CTEs), so it is one round trip and one commit.
Claims use ``FOR UPDATE SKIP LOCKED``. Runners sleep on ``LISTEN`` and wake on the
``pg_notify`` that a new or rescheduled task sends, or at the next due time.

``schema=`` puts every table in its own schema (tests use a fresh one each), and the
notification channel is per schema so neighbours do not wake each other.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..core.store import DagCommit, DagSnapshot, NewInstance
from ..core.waits import NewSignal
from ..errors import InvalidState, NotFound, PayloadTooLarge, StoreError
from ._common import event_record, instance_record, key_clash
from ._live import LiveHub, Subscription

try:
    import psycopg
    from psycopg import sql
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the PostgreSQL store needs the postgres extra: pip install 'statemachine_wf[postgres]'"
    ) from exc

from ._pgconn import Q, _jsonb, log  # needs psycopg: after the check above
from ._pggroup import PgGrouped
from ._pglive import LiveListener


def _sizes(message: str) -> tuple[int, int]:
    """``(size, limit)`` from a payload-limit refusal of the SQL of migrations 006 and 009."""
    found = re.search(r"is (\d+) bytes; the limit is (\d+) bytes", message)
    return (int(found.group(1)), int(found.group(2))) if found else (-1, -1)


class PostgresStore(PgGrouped):
    """A :class:`~statemachine_wf.core.store.Store` on PostgreSQL (its connections, the pool and
    LISTEN, are :class:`~statemachine_wf.stores._pgconn.PgConnections`; the decisions its
    threads commit at once share statements: :class:`~._pggroup.PgGrouped`)."""

    dialect = "postgres"
    json_decoded = True  # jsonb comes back decoded (by _common.loads, see _configured)
    # Each statement its own commit, no writer lock in the process: a finish and the next
    # claim as one transaction took two round trips more (BEGIN, COMMIT) than the commit it
    # saved (bench/README.md, "the finish and the next claim in one transaction").
    one_writer = False
    # A runner's completions on one instance, committed together (runtime/dag_group.py):
    # one statement's fixed cost for several of a fan-out's branches.
    dag_group_most = 32

    def _dag_tail(self, commit: DagCommit, params: dict[str, Any]) -> list[str]:
        # The retry's and the sibling's CTEs only where the commit has either: every CTE
        # a statement names is set up at each call (queries.sql, dag_tasks).
        takes = commit.decision.retry is not None or params["sib_token"] is not None
        return ["dag_tasks", "dag_takes" if takes else "dag_takes_none", "dag_end"]

    # -- producers --------------------------------------------------------------------
    def _create_batch(self, news: Sequence[NewInstance]) -> list[tuple[str, bool]]:
        self._starts += 1
        params = {
            "ids": [n.id for n in news],
            "types": [n.type for n in news],
            "kinds": [n.kind for n in news],
            "steps": [n.initial for n in news],
            "inputs": [_jsonb(n.input) for n in news],
            "keys": [n.idempotency_key for n in news],
            "priorities": [n.priority for n in news],
            "parent_ids": [n.parent_id for n in news],
            "parent_nodes": [n.parent_node for n in news],
            "delays": [n.delay for n in news],
            "run_ats": [n.run_at for n in news],
            "traces": [n.trace_context for n in news],
            "channel": self.channel,
        }
        rows = self._all(Q["create_many"], params)
        # Every clash is raised before any fallback below: a create() there writes, and a
        # refused batch must not have started part of itself that way.
        for row, new in zip(rows, news, strict=True):
            if row["clash"] and new.idempotency_key is not None:  # a clash needs a key
                raise key_clash(new.idempotency_key, str(row["id"]), row["existing_type"], new.type)
        out: list[tuple[str, bool]] = []
        for row, new in zip(rows, news, strict=True):
            if row["id"] is not None:
                out.append((str(row["id"]), bool(row["created"])))
                continue
            # The key was committed by a concurrent producer after this statement's snapshot.
            out.append(self.create(new))
        return out

    # -- live updates -----------------------------------------------------------------
    def live_hub(self) -> LiveHub:
        with self._watch_lock:
            if self._live is None:
                self._live = LiveListener(
                    self.url,
                    self.live_channel,
                    register=self._live_watch,
                    unregister=self._live_unwatch,
                    sweep=self._live_sweep,
                )
            return self._live.hub

    def _live_watch(self, sub: Subscription) -> None:
        if self._one(Q["live_watch"], {"token": sub.token, "id": sub.instance_id}) is None:
            raise NotFound(f"no workflow instance {sub.instance_id!r}")

    def _live_unwatch(self, sub: Subscription) -> None:
        try:
            with self._transaction() as conn:
                gone = self._run(conn, "live_unwatch", self._params(token=sub.token)).fetchone()
                if gone is not None:  # the flag goes with the instance's last watcher
                    params = self._params(id=gone["instance_id"])
                    self._run(conn, "live_unflag_lock", params)
                    self._run(conn, "live_unflag", params)
        except StoreError as exc:  # the row only costs notifications until it is swept
            log.warning("live: could not unregister watcher of %s: %s", sub.instance_id, exc)

    def _live_sweep(self) -> None:
        self._write_count("live_sweep")

    # -- signals and timers ---------------------------------------------------------------
    def _signal_refusal(self, exc: StoreError, new: NewSignal) -> Exception | None:
        # The trigger's refusals (sql/postgres/005_signals.sql), told apart by SQLSTATE.
        cause = exc.__cause__
        state = getattr(cause, "sqlstate", None)
        if state == "SWF01" or isinstance(cause, psycopg.errors.InvalidTextRepresentation):
            return NotFound(f"no workflow instance {new.instance_id!r}")
        if state == "SWF02" and isinstance(cause, psycopg.Error):
            message = cause.diag.message_primary or str(cause)
            return InvalidState(message.removeprefix("wf_signals: "))
        if state == "54000" and isinstance(cause, psycopg.Error):
            # The limit in wf_settings (migration 006) is below this process's.
            size, limit = _sizes(cause.diag.message_primary or "")
            return PayloadTooLarge(f"signal {new.name!r} payload", size, limit)
        return None

    # -- DAG instances --------------------------------------------------------------------
    def dag_snapshot(self, instance_id: str, *, after_seq: int = 0) -> DagSnapshot | None:
        # One statement reads the version, the events and the slots from one MVCC
        # snapshot: anything committed after it that matters bumps the version, so the
        # CAS of a decision made on this snapshot fails rather than misleads.
        if not self._may_exist(instance_id):
            return None
        row = self._one(Q["dag_snapshot"], {"id": instance_id, "after": after_seq})
        if row is None:
            return None
        events = [event_record(e) for e in row["events"]]
        return DagSnapshot(instance_record(row["instance"]), events, tuple(row["slots"]))

    def drop_schema(self) -> None:
        """Drop this store's schema and everything in it (tests)."""
        with self._pool.connection() as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
            )
