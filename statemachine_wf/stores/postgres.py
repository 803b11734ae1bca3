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

from ..errors import (
    InvalidState,
    NotFound,
    PayloadTooLarge,
    StoreError,
)
from ..store import (
    Claim,
    DagSnapshot,
    NewInstance,
    TaskRecord,
)
from ..waits import NewSignal
from ._common import (
    Undecodable,
    event_record,
    instance_record,
    key_clash,
    new_lease_token,
    signal_record,
    task_record,
    undecodable,
)
from ._live import LiveHub, Subscription

try:
    import psycopg
    from psycopg import sql
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the PostgreSQL store needs the postgres extra: pip install 'statemachine_wf[postgres]'"
    ) from exc

from ._pgconn import PgConnections, Q, _jsonb, log  # needs psycopg: after the check above
from ._pglive import LiveListener, live_channel


def _sizes(message: str) -> tuple[int, int]:
    """``(size, limit)`` from a payload-limit refusal of the SQL of migrations 006 and 009."""
    found = re.search(r"is (\d+) bytes; the limit is (\d+) bytes", message)
    return (int(found.group(1)), int(found.group(2))) if found else (-1, -1)


class PostgresStore(PgConnections):
    """A :class:`~statemachine_wf.store.Store` on PostgreSQL (its connections, the pool and
    LISTEN, are :class:`~statemachine_wf.stores._pgconn.PgConnections`)."""

    dialect = "postgres"
    json_decoded = True  # jsonb comes back decoded (by _common.loads, see _configured)

    # -- producers --------------------------------------------------------------------
    def create_many(self, news: Sequence[NewInstance]) -> list[tuple[str, bool]]:
        if not news:
            return []
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
            "channel": self.channel,
        }
        rows = self._all(Q["create_many"], params)
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
        with self._listener_lock:
            if self._live is None:
                self._live = LiveListener(
                    self.url,
                    live_channel(self.schema),
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
            with self._conn() as conn:
                conn.execute(Q["live_unwatch"], {"token": sub.token})
        except StoreError as exc:  # the row only costs notifications until it is swept
            log.warning("live: could not unregister watcher of %s: %s", sub.instance_id, exc)

    def _live_sweep(self) -> None:
        with self._conn() as conn:
            conn.execute(Q["live_sweep"])

    # -- runners ----------------------------------------------------------------------
    def claim(
        self,
        *,
        worker: str,
        types: Sequence[str],
        lease: float,
        limit: int = 1,
        incarnation: str = "",
    ) -> list[Claim]:
        rows = self._all(
            Q["claim"],
            {
                "types": list(types),
                "worker": worker,
                "lease": lease,
                "limit": limit,
                "token": new_lease_token(incarnation),
            },
        )
        claims = []
        for row in rows:
            try:
                task = task_record(row)
                raw = row["instance"]
                if raw is None:
                    # The instance changed between our read and our write (an operator):
                    # we hold the task, but must look at the instance afresh.
                    claims.append(
                        self._bare_claim(task, worker=worker, lease=lease, incarnation=incarnation)
                    )
                    continue
                if isinstance(raw, Undecodable):
                    raise ValueError(f"stored instance: {raw.reason}")
                instance = instance_record(raw)
                problem = undecodable(instance)
                if problem is not None:
                    raise ValueError(problem)
                raw_signals = row["signals"]
                signals = (
                    None  # one payload too deep: the runner reads them one by one
                    if raw_signals is None or isinstance(raw_signals, Undecodable)
                    else tuple(signal_record(r, decoded=True) for r in raw_signals)
                )
                claims.append(Claim(task, instance, started=bool(row["started"]), signals=signals))
            except (ValueError, KeyError, TypeError) as exc:
                self.quarantine(
                    str(row["instance_id"]), reason=f"corrupt row: {exc}", worker=worker
                )
        return claims

    def _bare_claim(
        self, task: TaskRecord, *, worker: str, lease: float, incarnation: str
    ) -> Claim:
        with self._conn() as conn, conn.transaction():
            inst = conn.execute(Q["bump_version"], {"id": task.instance_id}).fetchone()
            leased = conn.execute(
                Q["lease_task"],
                {
                    "task_id": task.id,
                    "worker": worker,
                    "lease": lease,
                    "token": new_lease_token(incarnation),
                },
            ).fetchone()
            if inst is None or leased is None:  # rolled back: nothing claimed
                raise StoreError(f"postgres: claim of {task.instance_id}: its rows are gone")
        return Claim(task_record(leased), instance_record(inst), started=False)

    def claim_instance(
        self, instance_id: str, *, worker: str, lease: float, incarnation: str = ""
    ) -> Claim | None:
        with self._conn() as conn, conn.transaction():
            row = conn.execute(Q["claim_instance_lock"], {"id": instance_id, "worker": worker})
            locked = row.fetchone()
            if locked is None:
                return None
            inst = conn.execute(Q["bump_version"], {"id": instance_id}).fetchone()
            leased = conn.execute(
                Q["lease_task"],
                {
                    "task_id": locked["id"],
                    "worker": worker,
                    "lease": lease,
                    "token": new_lease_token(incarnation),
                },
            ).fetchone()
            if inst is None or leased is None:  # rolled back: nothing claimed
                raise StoreError(f"postgres: claim of {instance_id}: its rows are gone")
        return Claim(task_record(leased), instance_record(inst), started=False)

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
