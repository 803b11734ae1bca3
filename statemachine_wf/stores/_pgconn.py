"""The PostgreSQL store's connections: the pool, its health, LISTEN, and error translation.

Everything :class:`~statemachine_wf.stores.postgres.PostgresStore` needs to talk to the
server, apart from the SQL: a ``psycopg_pool`` pool of autocommit connections (checked
after an outage, re-grown at a fixed interval while the database is away), the one
wrapper that turns driver errors into the port's (:func:`wrap_errors`), the primitives of
:class:`~statemachine_wf.stores._decisions.SqlStore`, the ``LISTEN`` thread that wakes idle
runners, and the migrations the first call applies.
"""

from __future__ import annotations

import logging
import re
import select
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import cache, lru_cache
from typing import Any

from ..core.store import Claimant
from ..definition.config import DEFAULT_DAG_STICKY, DEFAULT_POOL_SIZE, DEFAULT_RUNNER_CONNECTIONS
from ..definition.limits import checked_dumps
from ..errors import ConcurrencyConflict, DataRejected, MigrationError, StoreError, StoreUnavailable
from ._common import Translating
from ._decisions import SqlStore
from ._sql import queries, without_comment_lines
from ._wakeup import Wakeup

try:
    import psycopg
    from psycopg import sql
    from psycopg.rows import dict_row
    from psycopg.types.json import Jsonb
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the PostgreSQL store needs the postgres extra: pip install 'statemachine_wf[postgres]'"
    ) from exc

from ._pghealth import Health
from ._pglive import LiveListener, live_channel  # needs psycopg: after the check above
from ._pgoffer import Offers
from ._pgprepare import run_prepared
from ._pgshare import Share, timed_out
from ._pgtypes import configure_loaders

log = logging.getLogger("statemachine_wf.postgres")
# Sent without their whole-line comments: fewer bytes on the wire and in the server's
# parser (bench/README.md, "Encoding once, a SQLite tail without its SELECT, PostgreSQL
# without comments").
Q = {name: without_comment_lines(text) for name, text in queries("postgres").items()}
# The statements marked "-- plan: scans" (the operator's counts and listings, retention):
# planned with sequential scans allowed. Every other one reaches its rows by key, on
# connections that price sequential scans out (docs/architecture.md, "Plans made on a
# small table").
SCANS = frozenset(
    name
    for name, text in queries("postgres").items()
    if "-- plan: scans" in (line.strip() for line in text.splitlines())
)
# A placeholder psycopg would parse: ``%(name)s``, a literal ``%%``, or any other ``%``.
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%|%.?", re.DOTALL)


@lru_cache(maxsize=1024)
def positional(query: str) -> tuple[bytes, tuple[str, ...]]:
    """``query`` with ``$1``, ``$2``, ... for its ``%(name)s`` placeholders, and the names.

    Converted once per text and sent through a raw cursor, so no execution parses it again.
    psycopg caches its own conversion only for texts under 4 KiB: the claim, at 5.5 KiB
    once it fired timers, was re-parsed on every call (bench/README.md, "The claim
    parsed once"). A name used twice is one parameter, as in psycopg's conversion.
    """
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        if match.group(0) == "%%":
            return "%"
        name = match.group(1)
        if name is None:
            raise ValueError(f"only %(name)s placeholders are supported, not {match.group(0)!r}")
        return f"${names.setdefault(name, len(names) + 1)}"

    text = _PLACEHOLDER.sub(number, query)
    return text.encode(), tuple(names)


def execute(
    conn: psycopg.Connection[Any], query: str, params: dict[str, Any]
) -> psycopg.Cursor[Any]:
    """Run ``query`` with its named ``params`` (extra keys are ignored), parsed once."""
    text, names = positional(query)
    try:
        args = [params[name] for name in names]
    except KeyError as missing:
        raise psycopg.ProgrammingError(f"query parameter missing: {missing.args[0]}") from None
    # Prepared at the first call, not psycopg's fifth: each call before it was planned
    # again (docs/architecture.md, "Statements planned once per connection").
    return run_prepared(conn, text, args)


_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_MAX_SCHEMA = 63 - len("swf_wake_")


def wrap_errors() -> Translating:
    """Translate driver errors in one place: a duplicate (or migration 022's swf_lost_race,
    a serialization failure) is a lost race, a lost or unobtainable connection
    :class:`StoreUnavailable` (retried), a value the database cannot store DataRejected
    (classes 22 and 23, text the driver cannot encode), the rest StoreError (retried)."""
    return _WRAP


def _translated(exc: BaseException) -> BaseException | None:  # see wrap_errors
    if isinstance(exc, psycopg.errors.UniqueViolation | psycopg.errors.SerializationFailure):
        return ConcurrencyConflict("?", -1)
    if isinstance(exc, psycopg.DataError | psycopg.IntegrityError | UnicodeEncodeError):
        return DataRejected(f"postgres: {type(exc).__name__}: {exc}")
    if isinstance(exc, psycopg.Error) and _unavailable(exc):
        lost = not isinstance(exc, PoolTimeout)
        return StoreUnavailable(f"postgres: {type(exc).__name__}: {_first_line(exc)}", lost=lost)
    if isinstance(exc, psycopg.Error):
        return StoreError(f"postgres: {type(exc).__name__}: {exc}")
    return None


_WRAP = Translating(_translated)


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


@cache
def _joined(names: tuple[str, ...]) -> str:
    """One decision's statement: its named CTE pieces, in order."""
    return "\n".join(Q[name] for name in names)


@cache
def _then_claim(names: tuple[str, ...]) -> str:
    """A finish's statement with the claim after it: the finish without its closing
    SELECT, then the claim's CTEs, whose ``done`` is the finish's where the claim alone
    has a row of NULLs (queries.sql: ``apply_finish``, ``claim``)."""
    head, end, _ = _joined(names).rpartition("\nSELECT version, notified, ")
    _, start, tail = Q["claim"].partition("\n), held AS (")
    if not (end and start):
        raise AssertionError("queries.sql: the finish or the claim no longer fit together")
    return f"{head}\n, held AS ({tail}"


def _jsonb(value: Any) -> Jsonb:
    """A jsonb parameter, checked and encoded by the check both stores share
    (:func:`~statemachine_wf.definition.limits.checked_dumps`): DataRejected for what no store
    keeps."""
    text = checked_dumps(value)
    return Jsonb(value, dumps=lambda _: text)


class PgConnections(SqlStore):
    """A :class:`SqlStore` on a PostgreSQL pool: the connection side of the store."""

    _watch_thread = "swf-listen"
    offers_starts = True  # and after each migrate(), whether the schema has 023

    def __init__(
        self,
        url: str,
        *,
        schema: str = "public",
        pool_size: int = DEFAULT_POOL_SIZE,
        runner_connections: int = DEFAULT_RUNNER_CONNECTIONS,
        dag_connections: int = 0,
        dag_sticky: float = DEFAULT_DAG_STICKY,
        listen: bool = True,
        pool_timeout: float = 30.0,
        reconnect_interval: float = 0.5,
    ) -> None:
        """Open the pool (waiting up to ``pool_timeout`` s for a first connection).

        Args:
            url: ``postgresql://user@host:port/db`` (libpq parameters such as
                ``?connect_timeout=5`` may be added).
            schema: the schema of every table (created by :meth:`migrate`).
            pool_size: most connections the store's calls hold at once (4: see
                ``DEFAULT_POOL_SIZE``), DAG node commits on ``dag_connections`` apart.
            runner_connections: of those, the most a runner's worker threads hold at once
                (2); the others serve the process's starts, signals, reads (_pgshare.py).
            dag_connections: how many more connections DAG node commits may open (0: they
                wait for the ``pool_size`` ones with every other call), so that they wait
                for none of the others (docs/architecture.md, "Connections": a one-process
                runner of independent DAG instances gains, a fan-out or several processes
                on few cores lose).
            dag_sticky: seconds a DAG node task a runner's commit dispatches stays that
                runner's before other runners' claims take it (0: at once; docs/
                architecture.md, "A DAG instance's tasks kept to their runner").
            listen: wake runners on ``LISTEN``/``NOTIFY`` (one extra connection).
            pool_timeout: seconds a call waits for a connection before it raises
                :class:`~statemachine_wf.errors.StoreUnavailable`; while the database is
                away, runners keep calling, so they wait as long as it takes.
            reconnect_interval: seconds between connection attempts while the database
                is away (the pool does not back off): the store is usable again about
                this long after the database is back.
        """
        if not _IDENT.fullmatch(schema):  # fullmatch: "$" would let a trailing newline in
            raise ValueError(f"schema must be a lowercase identifier, got {schema!r}")
        if len(schema) > _MAX_SCHEMA:  # pg_notify refuses a longer channel: every start fails
            raise ValueError(
                f"schema must be at most {_MAX_SCHEMA} characters (its wake channel "
                f"swf_wake_<schema> must fit PostgreSQL's 63-byte names), got {len(schema)}"
            )
        if pool_size < 1 or dag_connections < 0:
            raise ValueError(
                "pool_size must be >= 1 and dag_connections >= 0, "
                f"got {pool_size}, {dag_connections}"
            )
        if not pool_timeout > 0:
            raise ValueError(f"pool_timeout must be > 0 seconds, got {pool_timeout}")
        if not 0 <= dag_sticky < float("inf"):  # NaN too
            raise ValueError(f"dag_sticky must be >= 0 seconds, got {dag_sticky}")
        if not reconnect_interval > 0:
            raise ValueError(f"reconnect_interval must be > 0 seconds, got {reconnect_interval}")
        self._share = Share(runner_connections, pool_size, pool_timeout)  # checks it too
        self.url = url
        self.schema = schema
        self.dag_sticky = float(dag_sticky)
        self.channel = f"swf_wake_{schema}"
        self.live_channel = live_channel(schema)  # what the statements that grow a log notify
        info = psycopg.conninfo.conninfo_to_dict(url)
        self._health = Health(  # no credentials in the log
            f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/"
            f"{info.get('dbname', '')} (schema {schema})"
        )
        # Connections known good since the last lost one: `_losses` counts losses, and a
        # pooled connection checked before the latest one is checked again at checkout.
        self._losses = 0
        self._back_at = 0  # `_losses` when the database was last back (or first opened):
        # a connection born before then that is found dead is a leftover of that outage
        self._verified = weakref.WeakKeyDictionary[psycopg.Connection[Any], int]()
        self._born = weakref.WeakKeyDictionary[psycopg.Connection[Any], int]()
        self._closed = threading.Event()
        # psycopg_pool backs off exponentially (1, 2, 4, ... s) between connection
        # attempts, so after a 35 s outage the next attempt came up to 30 s late. Instead
        # each attempt gives up after `reconnect_interval` and the pool is asked to grow
        # again at once (`_regrow`): one attempt every interval for as long as it takes.
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size + dag_connections,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                # plan_cache_mode: a prepared statement's first plan is its generic one,
                # where `auto` made five custom plans first (see `execute`). jit: a plan
                # priced past jit_above_cost (a scan priced out, above) was compiled at
                # every call, 250 ms, where the statement took 1 ms (bench/README.md,
                # "Session 45"); no statement here gains from it.
                "options": f"-c search_path={schema} -c enable_seqscan=off"
                " -c plan_cache_mode=force_generic_plan -c jit=off",
            },
            configure=self._configured,
            open=False,
            name=f"{_POOL_PREFIX}{schema}-{uuid.uuid4().hex[:6]}",
            timeout=pool_timeout,
            reconnect_timeout=reconnect_interval,
            reconnect_failed=self._regrow,
        )
        # With dag_connections, every call but a DAG node's commit passes it: those calls
        # hold at most pool_size connections at once, and a DAG commit never waits behind
        # them (`_lone_commit`). Without, the pool's own size is the limit.
        self.pool_size = pool_size
        self._gate = threading.BoundedSemaphore(pool_size) if dag_connections else None
        try:
            with wrap_errors():
                self._pool.open(wait=True, timeout=pool_timeout)
        except StoreError:
            self._closed.set()
            self._pool.close()
            raise
        self._wakeup = Wakeup()
        self._wakeup.announce = self._announce
        # Starts of other processes leased to this process's runners asleep (_pgoffer.py):
        # only where a LISTEN connection hears them and holds the lock that vouches for us.
        self._offers = (
            Offers(
                self._wakeup,
                write=self._write_one,
                instance=self._checked,
                encode=self._encode,
            )
            if listen
            else None
        )
        if self._offers is not None:
            self._wakeup.changed = self._offers.changed
        self._watch_lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._watching = threading.Event()  # set once the first LISTEN ran (or failed)
        if not listen:
            self._watching.set()  # no LISTEN thread: workers sleep until their due times
        self._migrated = False
        self._live: LiveListener | None = None

    # -- plumbing ---------------------------------------------------------------------
    def _configured(self, conn: psycopg.Connection[Any]) -> None:
        self._verified[conn] = self._born[conn] = self._losses  # fresh: good until a loss
        configure_loaders(conn)

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
    def _conn(self, *, gated: bool = True) -> Iterator[psycopg.Connection[Any]]:
        if not self._migrated:
            self._migrated = True
            self.migrate()
        _in_store.depth = getattr(_in_store, "depth", 0) + 1
        born = -1
        try:
            with wrap_errors(), self._share.held(gated):
                gate = self._gate if gated else None
                if gate is not None and not gate.acquire(timeout=self._pool.timeout):
                    raise timed_out(self._pool.timeout)
                try:
                    conn = self._checkout()
                    born = self._born.get(conn, -1)
                    try:
                        with conn:
                            yield conn
                    finally:
                        self._pool.putconn(conn)
                finally:
                    if gate is not None:
                        gate.release()
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

    def _lone_commit(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        return self._conn(gated=False)

    def _run(
        self, conn: psycopg.Connection[Any], name: str, params: dict[str, Any]
    ) -> psycopg.Cursor[Any]:
        if name not in SCANS:
            return execute(conn, Q[name], params)
        with conn.transaction():  # SET LOCAL: until this transaction (or the caller's) ends
            conn.execute("SET LOCAL enable_seqscan = on")
            return execute(conn, Q[name], params)

    def _run_decision(
        self, conn: psycopg.Connection[Any], names: Sequence[str], params: dict[str, Any]
    ) -> dict[str, Any] | None:
        # One statement: every CTE after the CAS reads FROM it, so a lost CAS writes nothing.
        row: dict[str, Any] | None = execute(conn, _joined(tuple(names)), params).fetchone()
        return row

    def _finish_then_claim(
        self, conn: psycopg.Connection[Any], names: Sequence[str], params: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, list[tuple[dict[str, Any], Any, Any]] | None]:
        # One row at least when the finish's CAS held (its `done` row, LEFT JOINed to what
        # was claimed); none when it was lost, and then nothing was claimed either.
        rows = execute(conn, _then_claim(tuple(names)), params).fetchall()
        if not rows:
            return None, []
        done = {"version": rows[0]["done_version"]}
        return done, None if rows[0]["made_due"] else self._claimed_rows(conn, rows)

    def _encode(self, value: Any) -> Jsonb:
        return _jsonb(value)

    def _array(self, values: Sequence[Any]) -> list[Any]:
        return list(values)

    def _params(self, **params: Any) -> dict[str, Any]:
        # The NOTIFY channels: of the statements that make work due, and of those that grow
        # a watched instance's log (queries.sql, append_events' `live`); `now` is unused
        # (now()).
        return {"now": time.time(), "channel": self.channel, "live": self.live_channel, **params}

    def _announce(self, types: Collection[str]) -> None:
        # Called by a claim's thread after its claim: a failure here must not fail that
        # claim. Untold, the other processes find the task at their next poll.
        try:
            self._write_one("announce", types=sorted(types))
        except StoreError as exc:
            log.debug("announcing due work failed (%s); left to the polls", exc)

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
            row: dict[str, Any] | None = execute(conn, query, params).fetchone()
            return row

    def _all(self, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        with self._conn() as conn:
            return list(execute(conn, query, params).fetchall())

    def retire(self, claimant: Claimant) -> None:
        if self._offers is not None:
            self._offers.retire(claimant)

    def close(self) -> None:
        if self._offers is not None:
            self._offers.close()
        self._closed.set()
        self.wake()
        if self._live is not None:
            self._live.stop()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        self._pool.close()

    def _watch(self) -> None:
        # A dedicated connection: LISTEN state must not leak into the pool. On any error
        # (the server restarted) wake everyone, wait a little and connect again; once
        # listening again wake everyone too, for the notifications sent meanwhile.
        lost = False
        while not self._closed.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    offers = self._offers
                    if offers is not None:
                        # Listening before the lock: a start that sees us alive is heard.
                        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(offers.channel)))
                        # Held still by our last connection, not yet gone on the server's
                        # side: a new key (the rows are written afresh with it).
                        take = "SELECT pg_try_advisory_lock(%s) AS taken"
                        while conn.execute(take, (offers.lock_key,)).fetchone() != (True,):
                            offers.rekey()
                        offers.listening()
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    self._watching.set()
                    if lost:
                        lost = False
                        log.debug("listener: listening again")
                        self.wake()
                    while not self._closed.is_set():
                        for note in conn.notifies(timeout=1.0, stop_after=1):
                            if offers is not None and note.channel == offers.channel:
                                offers.received(note.payload)
                            else:
                                self._wakeup.notify(note.payload)
            except psycopg.Error as exc:
                if self._offers is not None:
                    self._offers.lost()
                # The pool's next call says it on the log (once), not every attempt here.
                log.debug("listener connection lost (%s); reconnecting", _first_line(exc))
                lost = True
                self._watching.set()
                self.wake()
                self._closed.wait(self._pool.reconnect_timeout)

    # -- schema -----------------------------------------------------------------------
    def migrate(self, on_migration: Callable[[int, int], None] | None = None) -> int:
        self._migrated = True
        try:
            with self._pool.connection() as conn, conn.transaction():
                # One migrator at a time across every process.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.schema,))
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                )
                known = self._migrate_on(
                    conn, lambda script: conn.execute(script.encode()), on_migration
                )
        except psycopg.Error as exc:
            raise MigrationError(f"postgres migration failed: {exc}") from exc
        self.offers_starts = known >= 23  # wf_idle_runners (a test may stop short of it)
        return known
