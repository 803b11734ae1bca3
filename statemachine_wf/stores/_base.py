"""The port methods written once for both stores: the SQL differs, the Python does not.

:class:`SqlBase` (here) and :class:`~._decisions.SqlStore` (its subclass, the
decisions: the CAS commits and the claims) hold every method whose logic is the same on
SQLite and PostgreSQL once the SQL text and the connection handling are set aside. A
query is named: ``sql/<dialect>/queries.sql`` holds a section of the same name and the
same parameter names in each dialect, so one params dict serves both (each driver
ignores the names a statement does not use: SQLite's queries take ``:now`` where
PostgreSQL calls ``now()``).

A dialect supplies the primitives below (connections, running a named query, JSON and
array parameters, the wake-ups) and translates its driver's errors in one wrapper of its
own (``wrap_errors``). What a dialect still hands over by itself, and why, is in
docs/architecture.md, "One store over two dialects".
"""

from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar

from ..core.fold import Projection
from ..core.store import (
    KIND_NAMES,
    Claim,
    Claimant,
    InstanceRecord,
    LockRecord,
    NewInstance,
    TaskRecord,
    TypeKind,
    like_prefix,
)
from ..core.waits import NewSignal, SignalRecord
from ..definition.events import EventRecord, NewEvent, Status
from ..definition.limits import configured_max_payload_bytes
from ..errors import ConcurrencyConflict, InvalidState, SchemaTooNew, StoreError, TypeKindConflict
from ._common import (
    event_record,
    incarnation_prefix,
    instance_record,
    key_clash,
    letter_record,
    projection_params,
    signal_counts,
    signal_record,
    task_record,
)
from ._sql import migrations
from ._wakeup import Wakeup

Row = Any
"""A row as the driver returns it (``sqlite3.Row``, psycopg's ``dict_row``), by column name."""


class SqlBase(ABC):
    """The dialect-independent part of a SQL :class:`~statemachine_wf.core.store.Store`: the
    primitives a dialect supplies, the reads and the simple writes (the decisions are in
    :mod:`._decisions`)."""

    dialect: str
    json_decoded: ClassVar[bool]
    """Whether the driver hands JSON columns back decoded (psycopg's jsonb) or as text."""

    # -- primitives a dialect supplies -----------------------------------------------
    @abstractmethod
    def migrate(self, on_migration: Callable[[int, int], None] | None = None) -> int:
        """Apply pending migrations (a dialect's connection runs this on first use)."""

    @abstractmethod
    def _reading(self) -> AbstractContextManager[Any]:
        """A connection for reads (outside any write transaction), errors translated."""

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Any]:
        """A connection inside one write transaction, committed on a clean exit and rolled
        back on an error (SQLite: ``BEGIN IMMEDIATE``, the writer lock taken up front)."""

    def _statement(self) -> AbstractContextManager[Any]:
        """A connection for one write query (a statement, or SQLite's short script).

        A transaction by default; PostgreSQL runs the single statement on an autocommit
        connection instead (one statement is one commit: no BEGIN/COMMIT round trips).
        """
        return self._transaction()

    @abstractmethod
    def _run(self, conn: Any, name: str, params: dict[str, Any]) -> Any:
        """Run the named query on ``conn``; the driver's cursor (SQLite: of the script's
        last statement)."""

    @abstractmethod
    def _run_decision(self, conn: Any, names: Sequence[str], params: dict[str, Any]) -> Row | None:
        """Run the named pieces as one decision guarded by the CAS that opens the first.

        The first piece's first statement is the CAS on ``wf_instances.version``; the last
        piece's last statement returns the new ``version``. None when the CAS matched no row,
        and then nothing at all was written. PostgreSQL joins the pieces into one statement
        of data-modifying CTEs that all read FROM the CAS's RETURNING (empty when it failed);
        SQLite runs them as one script in the caller's ``BEGIN IMMEDIATE`` transaction and
        stops after the CAS when it changed no row (under the writer lock nobody moves the
        version between the statements).
        """

    @abstractmethod
    def _encode(self, value: Any) -> Any:
        """A JSON parameter as this driver takes it."""

    @abstractmethod
    def _array(self, values: Sequence[Any]) -> Any:
        """A list parameter: a PostgreSQL array, a JSON array for SQLite's ``json_each``."""

    def _params(self, **params: Any) -> dict[str, Any]:
        """``params`` plus what every query of the dialect may use (``now``; PostgreSQL's
        notification ``channel``)."""
        return {"now": time.time(), **params}

    def _made_due(self) -> None:  # noqa: B027 (a hook: PostgreSQL's SQL notifies itself)
        """A write may have made a task due: wake a worker of this process (SQLite)."""

    def _may_exist(self, instance_id: str) -> bool:
        """Whether ``instance_id`` can name a row at all (PostgreSQL: a uuid)."""
        return True

    @abstractmethod
    def _kind_conflict(self, exc: Exception) -> bool:
        """Whether a driver error is the one-kind trigger's refusal (migration 011)."""

    _wakeup: Wakeup
    """How this process's idle workers sleep (``wait_for_work``); the dialect makes it."""
    _watch_thread: ClassVar[str]
    """The name of the thread that runs ``_watch``."""
    _watcher: threading.Thread | None
    _watch_lock: threading.Lock
    _watching: threading.Event
    """Set by ``_watch`` once it hears other processes' commits (or has failed)."""

    def _start_watching(self) -> None:
        """Make sure this process hears of work other processes make due: back once the
        watch (``_watch``, one thread per store) is up or has failed; cheap when it is."""
        if self._watching.is_set():
            return
        with self._watch_lock:
            if self._watcher is None:
                self._watcher = threading.Thread(
                    target=self._watch, name=self._watch_thread, daemon=True
                )
                self._watcher.start()
        self._watching.wait(timeout=10)

    @abstractmethod
    def _watch(self) -> None:
        """Hear other processes' commits and wake a worker for each (SQLite: PRAGMA
        ``data_version``; PostgreSQL: LISTEN), until the store closes."""

    # -- helpers ----------------------------------------------------------------------
    def _read_one(self, name: str, /, **params: Any) -> Row | None:
        with self._reading() as conn:
            return self._run(conn, name, self._params(**params)).fetchone()

    def _read_all(self, name: str, /, **params: Any) -> list[Row]:
        with self._reading() as conn:
            return list(self._run(conn, name, self._params(**params)).fetchall())

    def _write_one(self, name: str, /, **params: Any) -> Row | None:
        with self._statement() as conn:
            return self._run(conn, name, self._params(**params)).fetchone()

    def _write_all(self, name: str, /, **params: Any) -> list[Row]:
        with self._statement() as conn:
            return list(self._run(conn, name, self._params(**params)).fetchall())

    def _write_count(self, name: str, /, **params: Any) -> int:
        """Run a write query; the number of rows its (last) statement changed."""
        with self._statement() as conn:
            return int(self._run(conn, name, self._params(**params)).rowcount)

    def _json(self, value: Any) -> Any:
        return value if self.json_decoded else json.loads(value)

    def _migrate_on(
        self,
        conn: Any,
        run_script: Callable[[str], object],
        on_migration: Callable[[int, int], None] | None,
    ) -> int:
        """What ``migrate`` does in either dialect, on ``conn`` inside the dialect's
        transaction: every pending migration script (run by ``run_script``) in order, each
        recorded; then this process's payload limit for the SQL side. The newest version
        this package knows (SchemaTooNew when the database is at a newer one)."""
        self._run(conn, "migrations_create_table", {})
        done = {int(r["version"]) for r in self._run(conn, "migrations_applied", {}).fetchall()}
        scripts = migrations(self.dialect)
        known = max((n for n, _ in scripts), default=0)
        if done and max(done) > known:
            raise SchemaTooNew(max(done), known)
        pending = [(n, script) for n, script in scripts if n not in done]
        if on_migration is not None:
            on_migration(0, len(pending))
        for applied, (number, script) in enumerate(pending, start=1):
            run_script(script)
            self._run(conn, "migration_record", self._params(version=number))
            if on_migration is not None:
                on_migration(applied, len(pending))
        limit = configured_max_payload_bytes()
        if limit is not None:
            setting = self._params(name="max_payload_bytes", value=str(limit))
            self._run(conn, "set_setting", setting)
        return known

    # -- InstanceLog ------------------------------------------------------------------
    def _create_params(self, new: NewInstance) -> dict[str, Any]:
        return {
            "id": new.id,
            "type": new.type,
            "kind": new.kind,
            "step": new.initial,
            "input": self._encode(new.input),
            "key": new.idempotency_key,
            "priority": new.priority,
            "parent_id": new.parent_id,
            "parent_node": new.parent_node,
            "created": self._encode({"input": new.input, "initial": new.initial or None}),
            "delay": new.delay,
            "run_at": new.run_at,
            "trace": new.trace_context,
        }

    def create_many(self, news: Sequence[NewInstance]) -> list[tuple[str, bool]]:
        # One commit for the batch, all or nothing. A key twice in it is one instance (the
        # first), unless the two want different types: then the batch is refused, as it
        # is when a stored key started another type.
        first: dict[str, NewInstance] = {}
        for new in news:
            if new.idempotency_key is not None:
                seen = first.setdefault(new.idempotency_key, new)
                if seen.type != new.type:
                    raise key_clash(new.idempotency_key, seen.id, seen.type, new.type)
        out = self._create_batch(news) if news else []
        if any(created for _, created in out):
            self._made_due()
        return out

    @abstractmethod
    def _create_batch(self, news: Sequence[NewInstance]) -> list[tuple[str, bool]]:
        """``create`` for every item in one commit (keys checked by ``create_many``)."""

    def _created(self, row: Row | None, key: str | None) -> tuple[str, bool] | None:
        """What a create returns: its row's id, created; or the id holding the key; None
        when the conflicting row vanished between the two statements (create again)."""
        if row is not None:
            return str(row["id"]), True
        existing = self._read_one("instance_by_key", key=key)
        return None if existing is None else (str(existing["id"]), False)

    def get(self, instance_id: str) -> InstanceRecord | None:
        if not self._may_exist(instance_id):
            return None  # not an id at all: no such instance (rather than a driver error)
        row = self._read_one("get_instance", id=instance_id)
        return None if row is None else instance_record(row)

    def events(self, instance_id: str, *, after_seq: int = 0) -> list[EventRecord]:
        return [event_record(r) for r in self._read_all("events", id=instance_id, after=after_seq)]

    def _instance_filter(
        self, status: Sequence[Status] | None, type_prefix: str | None, include_deleted: bool
    ) -> dict[str, Any]:
        """The parameters of the filter ``list_instances`` and ``count_instances`` share."""
        return {
            "any_status": not status,
            "status": self._array([str(s) for s in status or ()]),
            "pattern": like_prefix(type_prefix) if type_prefix else None,
            "deleted": include_deleted,
        }

    def list_instances(
        self,
        *,
        status: Sequence[Status] | None = None,
        type_prefix: str | None = None,
        limit: int = 100,
        include_deleted: bool = False,
        offset: int = 0,
    ) -> list[InstanceRecord]:
        where = self._instance_filter(status, type_prefix, include_deleted)
        rows = self._read_all("list_instances", **where, limit=limit, offset=offset)
        return [instance_record(r) for r in rows]

    def count_instances(
        self,
        *,
        status: Sequence[Status] | None = None,
        type_prefix: str | None = None,
        include_deleted: bool = False,
    ) -> int:
        where = self._instance_filter(status, type_prefix, include_deleted)
        row = self._read_one("count_instances", **where)
        return 0 if row is None else int(row["n"])

    def children(self, parent_id: str) -> list[InstanceRecord]:
        return [instance_record(r) for r in self._read_all("children", id=parent_id)]

    def rebuild(self, instance_id: str, projection: Projection) -> None:
        # Bumps the version (no CAS of its own): a decision made on the old row loses.
        params = projection_params(projection, self._encode)
        self._write_count("rebuild", **params, id=instance_id)

    def soft_delete(self, instance_id: str) -> bool:
        # The mark and its WORKFLOW_DELETED event in one commit; only an ended instance.
        return self._write_one("soft_delete", id=instance_id) is not None

    def purge_batch(self, *, older_than: float, batch_size: int, soft: bool = False) -> int:
        query = "soft_purge_batch" if soft else "purge_batch"
        return len(self._write_all(query, age=older_than, batch=batch_size))

    # -- TaskQueue: reads, leases, wake-ups -----------------------------------------
    def task(self, instance_id: str, slot: str = "") -> TaskRecord | None:
        row = self._read_one("get_task", id=instance_id, slot=slot)
        return None if row is None else task_record(row, now=time.time())

    def active(self, *, types: Sequence[str] | None = None) -> list[InstanceRecord]:
        found = [instance_record(r) for r in self._read_all("active")]
        return [i for i in found if types is None or i.type in types]

    def heartbeat(
        self,
        *,
        worker: str,
        lease: float,
        log_every: float | None = None,
        incarnation: str | None = None,
    ) -> int:
        # Fenced by the incarnation's lease-token prefix (`mine`): a live runner never
        # extends the leases of a dead twin that had the same worker id.
        mine = incarnation_prefix(incarnation)
        if log_every is None:
            return self._write_count("heartbeat", worker=worker, lease=lease, mine=mine)
        # A claim's first sighting marks it (heartbeat_token = its lease token); a later
        # one logs a HEARTBEAT at most every `log_every` seconds: a lease that survives a
        # restart of its runner shows in the log, a short step writes no event at all.
        row = self._write_one(
            "heartbeat_logged",
            worker=worker,
            lease=lease,
            every=log_every,
            mine=mine,
            payload=self._encode({"lease_seconds": lease}),
        )
        return 0 if row is None else int(row["n"])

    def release(
        self,
        *,
        worker: str,
        instance_ids: Sequence[str] | None = None,
        token: str | None = None,
        incarnation: str | None = None,
        unrun: bool = False,
    ) -> None:
        mine = incarnation_prefix(incarnation)
        if instance_ids is None:
            self._write_all("release_all", worker=worker, mine=mine)
        else:
            ids = self._array(list(instance_ids))
            unrun = unrun and token is not None  # only a claim named by its token
            self._write_all("release", worker=worker, ids=ids, token=token, mine=mine, unrun=unrun)
        self._made_due()  # the tasks handed back are due now, for any runner

    def lease_incarnations(self, *, worker: str) -> list[str]:
        return [str(r["inc"]) for r in self._read_all("lease_incarnations", worker=worker)]

    def wake_instances(self, instance_ids: Sequence[str]) -> None:
        # Only tasks no runner holds: a leased task's due time is its lease.
        self._write_all("wake_instances", ids=self._array(list(instance_ids)))
        self._made_due()

    def wake_parent(self, child_id: str) -> None:
        self._write_all("wake_parent", id=child_id)
        self._made_due()

    def wait_for_work(
        self, timeout: float, *, types: Sequence[str] = (), claimant: Claimant | None = None
    ) -> bool:
        # Nobody hears of other connections' commits until the watch is up, and a
        # thread's first wait may follow a claim made before that: a task made due in
        # between would be slept through until the safety poll. So each thread's first
        # wait returns at once, woken, the watch up; from then on it hears every commit
        # (and after a reconnect of the watch, every thread's next wait returns at once:
        # Wakeup.wake_all).
        self._start_watching()
        return self._wakeup.wait(timeout, types, claimant)

    def handed_claim(self, claimant: Claimant, *, spare: bool = False) -> Claim | None:
        return self._wakeup.handed(claimant, spare=spare)

    def hand_over(self, claimant: Claimant, claims: Sequence[Claim]) -> None:
        self._wakeup.hand(claimant, claims)

    def nudge(self, *, types: Sequence[str] | None = None, covered: bool = True) -> None:
        if types and covered:
            self._wakeup.notify(*types)
        else:
            self._wakeup.nudge(types or ())

    def wake(self) -> None:
        self._wakeup.wake_all()

    # -- Locks --------------------------------------------------------------------------
    def acquire_lock(self, key: str, instance_id: str) -> str:
        with self._transaction() as conn:
            # Queued as a waiter first, then the lock taken if free: the holder comes back
            # either way (ours or another's), and a holder is no waiter of its own lock.
            row = self._run(conn, "lock_acquire", self._params(key=key, id=instance_id))
            found = row.fetchone()
            if found is None:  # the upsert returns its row, always (see lock_acquire)
                raise StoreError(f"{self.dialect}: lock {key!r}: the acquire returned no holder")
            holder = str(found["holder"])
            if holder == instance_id:
                self._run(conn, "lock_unwait", self._params(key=key, id=instance_id))
        return holder

    def release_locks(self, instance_id: str, *, key: str | None = None) -> int:
        row = self._write_one("lock_release", id=instance_id, key=key)
        released = 0 if row is None else int(row["released"])
        if released:
            self._made_due()
        return released

    def lock_holder(self, key: str) -> str | None:
        row = self._read_one("lock_holder", key=key)
        return None if row is None else str(row["holder"])

    def locks(self, *, prefix: str = "") -> list[LockRecord]:
        pattern = like_prefix(prefix) if prefix else None
        waiters: dict[str, list[tuple[str, float]]] = {}
        for row in self._read_all("lock_waiters", pattern=pattern):
            waiter = (str(row["instance_id"]), float(row["since"]))
            waiters.setdefault(str(row["key"]), []).append(waiter)
        return [
            LockRecord(
                key=str(row["key"]),
                holder=str(row["holder"]),
                since=float(row["since"]),
                waiters=tuple(w for w, _ in waiters.get(str(row["key"]), ())),
                waiting_since=tuple(t for _, t in waiters.get(str(row["key"]), ())),
            )
            for row in self._read_all("locks_held", pattern=pattern)
        ]

    # -- Signals ------------------------------------------------------------------------
    @abstractmethod
    def _signal_refusal(self, exc: StoreError, new: NewSignal) -> Exception | None:
        """The domain error for a refusal of the signal trigger (migration 005: no such
        instance, an ended one, a payload over the stored limit); None for another."""

    def signal(self, new: NewSignal) -> int:
        # The insert bumps the instance's version (a trigger), so a decision made before
        # the signal arrived loses its CAS and is made again with the signal in view.
        try:
            row = self._write_one(
                "signal_insert",
                instance_id=new.instance_id,
                name=new.name,
                payload=self._encode(new.payload),
                token=new.token,
                delay=new.delay,
            )
        except StoreError as exc:
            refusal = self._signal_refusal(exc, new)
            if refusal is not None:
                raise refusal from None
            raise
        if row is None:
            raise StoreError(f"{self.dialect}: signal {new.name!r}: the insert returned no id")
        self._made_due()
        return int(row["id"])

    def pending_signals(self, instance_id: str) -> list[SignalRecord]:
        rows = self._read_all("signals_pending", instance_id=instance_id)
        return [signal_record(r, decoded=self.json_decoded) for r in rows]

    def signals(self, *, instance_id: str | None = None, limit: int = 100) -> list[SignalRecord]:
        rows = self._read_all("signals_list", instance_id=instance_id, limit=limit)
        return [signal_record(r, decoded=self.json_decoded) for r in rows]

    def signal_counts(self, *, instance_id: str | None = None) -> dict[str, int]:
        return signal_counts(self._read_all("signal_counts", instance_id=instance_id))

    # -- Inbox --------------------------------------------------------------------------
    def dead_letter(
        self, *, instance_id: str | None, envelope: dict[str, Any], reason: str, worker: str
    ) -> None:
        self._write_count(
            "dead_letter",
            instance_id=instance_id,
            envelope=self._encode(envelope),
            reason=reason,
            worker=worker,
        )

    def dead_letters(self, *, limit: int = 100) -> list[dict[str, Any]]:
        rows = self._read_all("dead_letters", limit=limit)
        return [letter_record(r, decoded=self.json_decoded) for r in rows]

    def dead_letter_get(self, letter_id: int) -> dict[str, Any] | None:
        row = self._read_one("dead_letter_get", id=letter_id)
        return None if row is None else letter_record(row, decoded=self.json_decoded)

    def mark_redriven(self, letter_id: int, *, instance_id: str | None, by: str) -> bool:
        # Once: the UPDATE matches only a letter not redriven yet, so of two concurrent
        # redrives exactly one sees its row changed.
        return self._write_count("mark_redriven", id=letter_id, instance_id=instance_id, by=by) == 1

    def purge_dead_letters_batch(self, *, older_than: float, batch_size: int) -> int:
        return len(self._write_all("purge_dead_letters_batch", age=older_than, batch=batch_size))

    def register_types(self, types: Sequence[str], *, by: str, kind: TypeKind = "machine") -> None:
        query = "register_type" if kind == "machine" else "register_dag_type"
        other: TypeKind = "dag" if kind == "machine" else "machine"
        with self._transaction() as conn:
            for type_name in sorted(types):  # one order everywhere: no deadlock
                try:
                    self._run(conn, query, self._params(type=type_name, by=by))
                except Exception as exc:
                    # The trigger of migration 011 (serialised per name): the name is
                    # registered as the other kind. The transaction writes nothing.
                    if self._kind_conflict(exc):
                        raise TypeKindConflict(
                            type_name, KIND_NAMES[other], KIND_NAMES[kind]
                        ) from None
                    raise

    def registered_types(self, kind: TypeKind = "machine") -> list[str]:
        query = "registered_types" if kind == "machine" else "registered_dag_types"
        return [r["type"] for r in self._read_all(query)]

    # -- DagRuns: definitions and results -------------------------------------------------
    def dag_record(self, instance_id: str, event: NewEvent, *, worker: str | None) -> bool:
        # Once: a duplicate delivery hits the unique index and inserts nothing.
        inserted = self._write_count(
            "dag_record",
            id=instance_id,
            node=event.node,
            event_type=str(event.event_type),
            attempt=event.attempt,
            payload=self._encode(event.payload),
            error=None if event.error is None else self._encode(event.error),
            worker=worker,
        )
        return inserted == 1

    def dag_save(self, name: str, definition: dict[str, Any]) -> int:
        for _ in range(10):
            try:
                row = self._write_one("dag_save", name=name, definition=self._encode(definition))
            except ConcurrencyConflict:
                continue  # a concurrent save took this version number
            if row is None:
                raise StoreError(f"{self.dialect}: DAG {name!r}: the save returned no version")
            return int(row["version"])
        raise ConcurrencyConflict(name, -1)

    def dag_definition(
        self, name: str, version: int | None = None
    ) -> tuple[int, dict[str, Any]] | None:
        row = self._read_one("dag_definition", name=name, version=version)
        return None if row is None else (int(row["version"]), dict(self._json(row["definition"])))

    def dag_definitions(self) -> list[tuple[str, int]]:
        return [(r["name"], int(r["version"])) for r in self._read_all("dag_definitions")]

    def dag_delete(self, name: str, *, cascade: bool = False) -> int:
        with self._transaction() as conn:
            used = self._run(conn, "dag_instances_of", self._params(name=name)).fetchone()
            if used is None:
                raise StoreError(f"{self.dialect}: DAG {name!r}: the count returned no row")
            if used["n"] and not cascade:
                raise InvalidState(
                    f"definition {name!r} is used by {used['n']} instance(s); "
                    "delete with cascade=True to delete them too"
                )
            self._run(conn, "dag_delete_instances_of", self._params(name=name))
            return int(self._run(conn, "dag_delete_definition", self._params(name=name)).rowcount)

    def dag_delete_test_run(self, instance_id: str) -> bool:
        return self._write_count("dag_delete_test_run", id=instance_id) == 1
