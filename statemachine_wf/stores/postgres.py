"""The PostgreSQL store: many processes on many machines.

psycopg 3 with a ``psycopg_pool`` pool of autocommit connections: every decision is one
statement (a chain of data-modifying CTEs), so it is one round trip and one commit.
Claims use ``FOR UPDATE SKIP LOCKED``. Runners sleep on ``LISTEN`` and wake on the
``pg_notify`` that a new or rescheduled task sends, or at the next due time.

``schema=`` puts every table in its own schema (tests use a fresh one each), and the
notification channel is per schema so neighbours do not wake each other.
"""

from __future__ import annotations

import logging
import re
import select
import threading
import time
import uuid
import weakref
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, assert_never

from ..decide import Continue, Finish, KeepTask, Park, Reschedule
from ..errors import (
    ConcurrencyConflict,
    DataRejected,
    InvalidState,
    MigrationError,
    NotFound,
    PayloadTooLarge,
    SchemaTooNew,
    StoreError,
    StoreUnavailable,
)
from ..limits import checked_dumps, configured_max_payload_bytes
from ..store import (
    Claim,
    Commit,
    DagCommit,
    DagSnapshot,
    NewDagInstance,
    NewInstance,
    TaskRecord,
)
from ..waits import NewSignal
from ._base import SqlStore
from ._common import (
    Undecodable,
    Wakeup,
    dag_apply_params,
    event_dicts,
    event_record,
    instance_record,
    key_clash,
    loads,
    new_event_dicts,
    new_lease_token,
    projection_params,
    signal_record,
    signal_write_params,
    task_record,
    undecodable,
)
from ._live import LiveHub, Subscription
from ._sql import migrations, queries

try:
    import psycopg
    from psycopg import sql
    from psycopg.rows import dict_row
    from psycopg.types.json import Jsonb, set_json_loads
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the PostgreSQL store needs the postgres extra: pip install 'statemachine_wf[postgres]'"
    ) from exc

from ._pglive import LiveListener, live_channel  # needs psycopg: after the check above

log = logging.getLogger("statemachine_wf.postgres")
Q = queries("postgres")
_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@contextmanager
def wrap_errors() -> Iterator[None]:
    """Translate driver errors in one place: a duplicate is a lost race, a lost or
    unobtainable connection :class:`StoreUnavailable` (retried), a value the database
    cannot store DataRejected (class 22 data exceptions, class 23 integrity violations,
    text the driver cannot encode), the rest StoreError: the database, retried."""
    try:
        yield
    except psycopg.errors.UniqueViolation as exc:
        raise ConcurrencyConflict("?", -1) from exc
    except (psycopg.DataError, psycopg.IntegrityError, UnicodeEncodeError) as exc:
        raise DataRejected(f"postgres: {type(exc).__name__}: {exc}") from exc
    except psycopg.Error as exc:
        if _unavailable(exc):
            lost = not isinstance(exc, PoolTimeout)
            raise StoreUnavailable(
                f"postgres: {type(exc).__name__}: {_first_line(exc)}", lost=lost
            ) from exc
        raise StoreError(f"postgres: {type(exc).__name__}: {exc}") from exc


# The server went away: class 08 (connection exception), 57P01-57P03 (admin shutdown,
# crash shutdown, cannot connect now); psycopg's own errors without a SQLSTATE
# ("server closed the connection unexpectedly", "the connection is closed").
_GONE = ("57P01", "57P02", "57P03")


def _unavailable(exc: psycopg.Error) -> bool:
    if isinstance(exc, PoolTimeout):
        return True
    if not isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _GONE


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class _QuietPool(logging.Filter):
    """Keep psycopg_pool's per-attempt warnings about this package's pools out of the log.

    While the database is away the pool logs a WARNING for every connection attempt
    (``error connecting in 'swf-…'``) and for every dead connection it discards; the
    store logs one WARNING when the database goes away and one when it is back instead.
    The pool's records are kept, as DEBUG, when ``psycopg.pool`` is enabled for DEBUG.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING:
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        ours = getattr(_in_store, "depth", 0) > 0 or any(
            isinstance(a, str) and a.startswith(_POOL_PREFIX) for a in args
        )
        if not ours or record.levelno < logging.WARNING:
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger("psycopg.pool").isEnabledFor(logging.DEBUG)


_POOL_PREFIX = "swf-"
_in_store = threading.local()  # >0 while this thread gets, returns or checks our connections
_quiet = _QuietPool()
logging.getLogger("psycopg.pool").addFilter(_quiet)  # a set: adding it twice is a no-op


def _readable(fd: int) -> bool:
    """Has the server sent anything on an idle connection (its goodbye, or EOF)?"""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    ready, _, _ = select.select([fd], [], [], 0)  # pragma: no cover - Windows
    return bool(ready)


class _Health:
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


def _jsonb(value: Any) -> Jsonb:
    """A jsonb parameter, checked and encoded by the check both stores share
    (:func:`~statemachine_wf.limits.checked_dumps`): DataRejected for what no store keeps."""
    text = checked_dumps(value)
    return Jsonb(value, dumps=lambda _: text)


def _sizes(message: str) -> tuple[int, int]:
    """``(size, limit)`` from a payload-limit refusal of the SQL of migrations 006 and 009."""
    found = re.search(r"is (\d+) bytes; the limit is (\d+) bytes", message)
    return (int(found.group(1)), int(found.group(2))) if found else (-1, -1)


class PostgresStore(SqlStore):
    """A :class:`~statemachine_wf.store.Store` on PostgreSQL."""

    dialect = "postgres"
    json_decoded = True  # jsonb comes back decoded (by _common.loads, see _configured)

    def __init__(
        self,
        url: str,
        *,
        schema: str = "public",
        pool_size: int = 16,
        listen: bool = True,
        pool_timeout: float = 30.0,
        reconnect_interval: float = 0.5,
    ) -> None:
        """Open the pool (waiting up to ``pool_timeout`` s for a first connection).

        Args:
            url: ``postgresql://user@host:port/db`` (libpq parameters such as
                ``?connect_timeout=5`` may be added).
            schema: the schema of every table (created by :meth:`migrate`).
            pool_size: most connections the pool opens.
            listen: wake runners on ``LISTEN``/``NOTIFY`` (one extra connection).
            pool_timeout: seconds a call waits for a connection before it raises
                :class:`~statemachine_wf.errors.StoreUnavailable`; while the database is
                away, runners keep calling, so they wait as long as it takes.
            reconnect_interval: seconds between connection attempts while the database
                is away (the pool does not back off): the store is usable again about
                this long after the database is back.
        """
        if not _IDENT.match(schema):
            raise ValueError(f"schema must be a lowercase identifier, got {schema!r}")
        if not pool_timeout > 0:
            raise ValueError(f"pool_timeout must be > 0 seconds, got {pool_timeout}")
        if not reconnect_interval > 0:
            raise ValueError(f"reconnect_interval must be > 0 seconds, got {reconnect_interval}")
        self.url = url
        self.schema = schema
        self.channel = f"swf_wake_{schema}"
        info = psycopg.conninfo.conninfo_to_dict(url)
        self._health = _Health(  # no credentials in the log
            f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/"
            f"{info.get('dbname', '')} (schema {schema})"
        )
        # Connections known good since the last lost one: `_losses` counts losses, and a
        # pooled connection checked before the latest one is checked again at checkout.
        self._losses = 0
        self._back_at = 0  # `_losses` when the database was last back (or first opened):
        # a connection born before then that is found dead is a leftover of that outage
        self._verified: weakref.WeakKeyDictionary[psycopg.Connection[Any], int] = (
            weakref.WeakKeyDictionary()
        )
        self._born: weakref.WeakKeyDictionary[psycopg.Connection[Any], int] = (
            weakref.WeakKeyDictionary()
        )
        self._closed = threading.Event()
        # psycopg_pool backs off exponentially (1, 2, 4, ... s) between connection
        # attempts, so after a 35 s outage the next attempt came up to 30 s late. Instead
        # each attempt gives up after `reconnect_interval` and the pool is asked to grow
        # again at once (`_regrow`): one attempt every interval for as long as it takes.
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "options": f"-c search_path={schema}",
            },
            configure=self._configured,
            open=False,
            name=f"{_POOL_PREFIX}{schema}-{uuid.uuid4().hex[:6]}",
            timeout=pool_timeout,
            reconnect_timeout=reconnect_interval,
            reconnect_failed=self._regrow,
        )
        try:
            with wrap_errors():
                self._pool.open(wait=True, timeout=pool_timeout)
        except StoreError:
            self._closed.set()
            self._pool.close()
            raise
        self._listen = listen
        self._wakeup = Wakeup()
        self._listener_lock = threading.Lock()
        self._listener: threading.Thread | None = None
        self._migrated = False
        self._live: LiveListener | None = None

    # -- plumbing ---------------------------------------------------------------------
    def _configured(self, conn: psycopg.Connection[Any]) -> None:
        self._verified[conn] = self._born[conn] = self._losses  # fresh: good until a loss
        # json/jsonb decode with _common.loads: a value nested too deep for Python becomes
        # Undecodable instead of raising RecursionError out of a fetch (which left a
        # claimed task leased for ever).
        set_json_loads(loads, conn)

    def _regrow(self, pool: ConnectionPool[Any]) -> None:
        """A connection attempt gave up: make the next one now (see ``__init__``)."""
        if self._closed.is_set():
            return
        _in_store.depth = getattr(_in_store, "depth", 0) + 1  # its warnings are ours
        try:
            pool.check()
        finally:
            _in_store.depth -= 1

    def _checkout(self) -> psycopg.Connection[Any]:
        """A pooled connection that is not known to be dead.

        After a restart the pool's idle connections are dead: the server said goodbye on
        each (its socket is readable) or, after a crash, may not have yet. A readable
        one, or any connection checked before the latest lost one, gets a round trip
        first; a dead one is discarded and the next taken, without the pool's back-off.
        Otherwise the check is one ``poll`` system call, no round trip.
        """
        for _ in range(self._pool.max_size + 1):
            conn = self._pool.getconn()
            try:
                if (
                    not conn.closed
                    and self._verified.get(conn, -1) >= self._losses
                    and not _readable(conn.fileno())
                ):
                    return conn
                ConnectionPool.check_connection(conn)
            except psycopg.Error as exc:
                conn.close()  # nothing was sent on it: take the next one
                self._pool.putconn(conn)
                if self._born.get(conn, -1) >= self._back_at:
                    self._lost(f"the server closed a connection: {_first_line(exc)}")
                # else a leftover of an outage already reported: it says nothing new
                continue
            except BaseException:
                self._pool.putconn(conn)
                raise
            self._verified[conn] = self._losses
            return conn
        return self._pool.getconn()  # every one was dead: wait for a fresh connection

    def _lost(self, reason: object) -> None:
        """The database went away (a dead connection, a failed call): say it once, and
        have every pooled connection checked again before its next use."""
        self._losses += 1
        self._health.lost(reason, self._losses)

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        if not self._migrated:
            self._migrated = True
            self.migrate()
        _in_store.depth = getattr(_in_store, "depth", 0) + 1
        born = -1
        try:
            with wrap_errors():
                conn = self._checkout()
                born = self._born.get(conn, -1)
                try:
                    with conn:
                        yield conn
                finally:
                    self._pool.putconn(conn)
        except StoreUnavailable as exc:
            self._lost(exc)
            raise
        finally:
            _in_store.depth -= 1
        if self._health.ok(born):
            self._back_at = self._losses

    # -- the primitives of SqlStore ------------------------------------------------------
    def _reading(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        return self._conn()

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        with self._conn() as conn, conn.transaction():
            yield conn

    def _statement(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        return self._conn()  # autocommit: one statement is one commit

    def _run(
        self, conn: psycopg.Connection[Any], name: str, params: dict[str, Any]
    ) -> psycopg.Cursor[Any]:
        return conn.execute(Q[name], params)

    def _encode(self, value: Any) -> Jsonb:
        return _jsonb(value)

    def _array(self, values: Sequence[Any]) -> list[Any]:
        return list(values)

    def _params(self, **params: Any) -> dict[str, Any]:
        # The NOTIFY channel of the statements that make work due; `now` is unused (now()).
        return {"now": time.time(), "channel": self.channel, **params}

    def _may_exist(self, instance_id: str) -> bool:
        try:
            uuid.UUID(instance_id)
        except (ValueError, TypeError, AttributeError):
            return False
        return True

    def _kind_conflict(self, exc: Exception) -> bool:
        # The trigger of migration 011 raises SQLSTATE SWF04.
        return isinstance(exc, psycopg.Error) and exc.sqlstate == "SWF04"

    def _one(self, query: str, params: dict[str, Any]) -> dict[str, Any] | None:
        with self._conn() as conn:
            row: dict[str, Any] | None = conn.execute(query, params).fetchone()
            return row

    def _all(self, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        with self._conn() as conn:
            return list(conn.execute(query, params).fetchall())

    def close(self) -> None:
        self._closed.set()
        self.wake()
        if self._live is not None:
            self._live.stop()
        if self._listener is not None:
            self._listener.join(timeout=5)
        self._pool.close()

    # -- schema -----------------------------------------------------------------------
    def migrate(self) -> int:
        self._migrated = True
        try:
            with self._pool.connection() as conn, conn.transaction():
                # One migrator at a time across every process.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.schema,))
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                )
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS wf_schema_migrations "
                    "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
                )
                rows: list[Any] = conn.execute(
                    "SELECT version FROM wf_schema_migrations"
                ).fetchall()
                done = {r["version"] for r in rows}
                known = max((n for n, _ in migrations("postgres")), default=0)
                if done and max(done) > known:
                    raise SchemaTooNew(max(done), known)
                for number, script in migrations("postgres"):
                    if number not in done:
                        conn.execute(script.encode())
                        conn.execute(
                            "INSERT INTO wf_schema_migrations (version) VALUES (%s)", (number,)
                        )
                limit = configured_max_payload_bytes()
                if limit is not None:
                    setting = {"name": "max_payload_bytes", "value": str(limit)}
                    conn.execute(Q["set_setting"], setting)
        except psycopg.Error as exc:
            raise MigrationError(f"postgres migration failed: {exc}") from exc
        return max((n for n, _ in migrations("postgres")), default=0)

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

    def apply(self, commit: Commit) -> int:
        decision = commit.decision
        params = projection_params(decision.state, _jsonb)
        params.update(
            id=commit.instance_id,
            version=commit.version,
            worker=commit.worker,
            events=_jsonb(event_dicts(decision)),
            channel=self.channel,
            lease=commit.lease,
        )
        params.update(signal_write_params(decision, _jsonb))
        middle = "\n" + Q["apply_signals"] if decision.signals else ""
        head = Q["apply_head"]
        if decision.dead_letter is not None:
            head += "\n" + Q["apply_dead_letter"]
            params["dead_letter"] = decision.dead_letter
        op = decision.task
        if isinstance(op, Continue):
            tail = "apply_continue"
            params.update(node=op.node, attempt=op.attempt, failures=op.failures)
        elif isinstance(op, Reschedule):
            tail = "apply_reschedule"
            params.update(
                node=op.node,
                delay=op.delay,
                failures=op.failures,
                attempt=decision.state.attempts.get(op.node, 0),
                in_doubt=op.in_doubt,
            )
        elif isinstance(op, Park):
            tail = "apply_park"
            params.update(node=op.node, failures=op.failures)
        elif isinstance(op, Finish):
            tail = "apply_finish"
        elif isinstance(op, KeepTask):
            tail = "apply_keep"
        else:
            assert_never(op)
        try:
            row = self._one(head + middle + "\n" + Q[tail], params)
        except ConcurrencyConflict:
            raise ConcurrencyConflict(commit.instance_id, commit.version) from None
        if row is None:
            current = self.get(commit.instance_id)
            raise ConcurrencyConflict(
                commit.instance_id, commit.version, None if current is None else current.version
            )
        return int(row["version"])

    def wait_for_work(self, timeout: float) -> bool:
        if self._listen and self._listener is None:
            self._start_listener()
        return self._wakeup.wait(timeout)

    def nudge(self) -> None:
        self._wakeup.nudge()

    def wake(self) -> None:
        self._wakeup.wake_all()

    def _start_listener(self) -> None:
        with self._listener_lock:
            if self._listener is not None:
                return
            ready = threading.Event()
            self._listener = threading.Thread(
                target=self._listen_loop, args=(ready,), name="swf-listen", daemon=True
            )
            self._listener.start()
        ready.wait(timeout=10)

    def _listen_loop(self, ready: threading.Event) -> None:
        # A dedicated connection: LISTEN state must not leak into the pool. On any error
        # (the server restarted) wake everyone, wait a little and connect again; once
        # listening again wake everyone too, for the notifications sent meanwhile.
        lost = False
        while not self._closed.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    ready.set()
                    if lost:
                        lost = False
                        log.debug("listener: listening again")
                        self.wake()
                    while not self._closed.is_set():
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self.nudge()
            except psycopg.Error as exc:
                # The pool's next call says it on the log (once), not every attempt here.
                log.debug("listener connection lost (%s); reconnecting", _first_line(exc))
                lost = True
                ready.set()
                self.wake()
                self._closed.wait(self._pool.reconnect_timeout)

    # -- dead letters ----------------------------------------------------------------
    def quarantine(self, instance_id: str, *, reason: str, worker: str) -> None:
        error = {"step": None, "code": "quarantined", "message": reason, "recoverable": True}
        with self._conn() as conn:
            conn.execute(
                Q["quarantine"],
                {"id": instance_id, "error": _jsonb(error), "reason": reason, "worker": worker},
            )

    # -- signals and timers ---------------------------------------------------------------
    def signal(self, new: NewSignal) -> int:
        params = {
            "instance_id": new.instance_id,
            "name": new.name,
            "payload": _jsonb(new.payload),
            "token": new.token,
            "delay": new.delay,
        }
        try:
            row = self._one(Q["signal_insert"], params)
        except StoreError as exc:
            # The trigger's refusals (sql/postgres/005_signals.sql) become domain errors.
            cause = exc.__cause__
            state = getattr(cause, "sqlstate", None)
            if state == "SWF01" or isinstance(cause, psycopg.errors.InvalidTextRepresentation):
                raise NotFound(f"no workflow instance {new.instance_id!r}") from None
            if state == "SWF02" and isinstance(cause, psycopg.Error):
                message = cause.diag.message_primary or str(cause)
                raise InvalidState(message.removeprefix("wf_signals: ")) from None
            if state == "54000" and isinstance(cause, psycopg.Error):
                # The limit in wf_settings (migration 006) is below this process's.
                size, limit = _sizes(cause.diag.message_primary or "")
                raise PayloadTooLarge(f"signal {new.name!r} payload", size, limit) from None
            raise
        if row is None:
            raise StoreError(f"postgres: signal {new.name!r}: the insert returned no id")
        return int(row["id"])

    # -- DAG instances --------------------------------------------------------------------
    def dag_create(self, new: NewDagInstance) -> tuple[str, bool]:
        params = {
            "id": new.id,
            "type": new.type,
            "input": _jsonb(new.input),
            "key": new.idempotency_key,
            "priority": new.priority,
            "parent_id": new.parent_id,
            "name": new.name,
            "version": new.version,
            "test": new.test,
            "events": _jsonb(new_event_dicts(new.events)),
            "start": new.start,
            "delay": new.delay,
            "channel": self.channel,
        }
        row = self._one(Q["dag_create"], params)
        if row is not None:
            return str(row["id"]), True
        existing = self._one(Q["instance_by_key"], {"key": new.idempotency_key})
        if existing is None:
            return self.dag_create(new)
        return str(existing["id"]), False

    def dag_claim(
        self,
        *,
        worker: str,
        types: Sequence[str],
        lease: float,
        limit: int = 1,
        incarnation: str = "",
    ) -> list[Claim]:
        params = {
            "types": list(types),
            "worker": worker,
            "lease": lease,
            "limit": limit,
            "token": new_lease_token(incarnation),
        }
        rows = self._all(Q["dag_claim"], params)
        claims = []
        for r in rows:
            raw = r["instance"]
            problem = (
                f"stored instance: {raw.reason}"
                if isinstance(raw, Undecodable)
                else undecodable(instance_record(raw))
            )
            if problem is not None:
                self.quarantine(
                    str(r["instance_id"]), reason=f"corrupt row: {problem}", worker=worker
                )
                continue
            claims.append(Claim(task_record(r), instance_record(raw), started=True, more=r["more"]))
        return claims

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

    def dag_apply(self, commit: DagCommit) -> int:
        params = dag_apply_params(commit, _jsonb)
        params["channel"] = self.channel
        try:
            row = self._one(Q["dag_apply"], params)
        except ConcurrencyConflict:
            raise ConcurrencyConflict(commit.instance_id, commit.version) from None
        if row is None:  # the executor re-reads anyway: no round trip for the current version
            raise ConcurrencyConflict(commit.instance_id, commit.version)
        return int(row["version"])

    def drop_schema(self) -> None:
        """Drop this store's schema and everything in it (tests)."""
        with self._pool.connection() as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
            )
