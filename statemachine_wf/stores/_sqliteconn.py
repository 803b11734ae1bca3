"""The SQLite store's connections: reads per thread, writes grouped, error translation.

Everything :class:`~statemachine_wf.stores.sqlite.SQLiteStore` needs to talk to the file,
apart from the SQL: a read connection per thread (WAL, ``synchronous``, foreign keys),
one write connection on which every write runs in ``BEGIN IMMEDIATE`` behind an in-process
writer lock, the writes queued behind each other sharing one COMMIT (group commit: see
``_write``), the one wrapper that turns driver errors into the port's
(:func:`wrap_errors`), the primitives of :class:`~statemachine_wf.stores._decisions.SqlStore`
(a named query may be a short script), the wake-ups (an in-process condition, and a
watcher of ``PRAGMA data_version`` for other processes' commits, which also feeds the
live updates), and the migrations the first connection applies.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

from ..errors import (
    ConcurrencyConflict,
    DataRejected,
    MigrationError,
    NotFound,
    SchemaTooNew,
    StoreError,
)
from ._common import Translating, dumps
from ._decisions import SqlStore
from ._filelock import WriterQueue
from ._live import LiveHub, Subscription
from ._sql import guarded_statements, queries, split_statements
from ._wakeup import Wakeup

Q = queries("sqlite")
_SCRIPTS = {name: guarded_statements(text) for name, text in Q.items()}
log = logging.getLogger("statemachine_wf.sqlite")


def _translated(exc: BaseException) -> BaseException | None:
    if isinstance(exc, sqlite3.IntegrityError):
        if "UNIQUE constraint failed" in str(exc):
            return ConcurrencyConflict("?", -1)
        return DataRejected(f"sqlite: {type(exc).__name__}: {exc}")
    if isinstance(exc, sqlite3.DataError | OverflowError | UnicodeEncodeError):
        return DataRejected(f"sqlite: {type(exc).__name__}: {exc}")
    if isinstance(exc, sqlite3.Error):
        return StoreError(f"sqlite: {type(exc).__name__}: {exc}")
    return None


_WRAP = Translating(_translated)


def wrap_errors() -> Translating:
    """Translate driver errors in one place: a duplicate is a lost race, a value the
    database cannot store DataRejected, the rest StoreError.

    As the PostgreSQL store's: callers that know which row a unique index refused
    translate the duplicate themselves first (with the instance and version).
    """
    return _WRAP


class _Result:
    """A statement's rows, fetched to the end (so the statement is finished before
    COMMIT, a RETURNING one included) and its row count."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self.rows: list[sqlite3.Row] = cursor.fetchall()
        self.rowcount = cursor.rowcount

    def fetchone(self) -> sqlite3.Row | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[sqlite3.Row]:
        return self.rows


_GROUP_MAX = 16
"""The most writes one COMMIT carries (see SQLiteConnections._write): a bound on how
long the group's first write waits for the others."""


def _in_transaction(conn: sqlite3.Connection) -> bool:
    """Whether ``conn`` is inside a transaction; False for a closed connection too."""
    try:
        return conn.in_transaction
    except sqlite3.Error:
        return False


def _closed_error() -> StoreError:
    return StoreError("sqlite: the store is closed")


class _Group:
    """The writes sharing one transaction: released together once its COMMIT is durable,
    or all told it failed."""

    __slots__ = ("done", "error", "size")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: Exception | None = None
        self.size = 0

    def wait(self) -> None:
        self.done.wait()
        if self.error is not None:
            raise StoreError(
                f"sqlite: the commit of this write failed: {self.error}"
            ) from self.error


class SQLiteConnections(SqlStore):
    """A :class:`SqlStore` on one SQLite file: the connection side of the store."""

    _watch_thread = "swf-sqlite-watch"

    def __init__(self, path: str, *, synchronous: str = "FULL", busy_timeout: float = 30.0):
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        self.path = path
        self.synchronous = synchronous.upper()
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._wakeup = Wakeup()
        self._writer = threading.Lock()
        self._queue = threading.Lock()  # guards _queued
        self._queued = 0  # writers waiting for the writer lock
        self._group: _Group | None = None  # the open transaction's writes (group commit)
        self._wconn: sqlite3.Connection | None = None
        self._writers = WriterQueue(path, busy_timeout)  # this process's turn among writers
        self._appended: dict[str, int] = {}  # the open transaction's events: id -> seq
        self._watcher: threading.Thread | None = None
        self._watch_lock = threading.Lock()
        self._watching = threading.Event()  # set once the watcher read data_version
        self._closed = threading.Event()
        self._counting = threading.Lock()  # guards _reads
        self._reads = 0  # reads under way on this process's connections
        self._idle = threading.Event()  # set once the store is closed and no read is under way
        self._migrated = False
        self._noting = False  # the write connection notes appended events (_start_live)
        self._live = LiveHub(
            start=self._start_live, stop=self._stop_live, register=self._live_watch
        )

    # -- connections ------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        if self._closed.is_set():  # a closed store opens nothing again
            raise _closed_error()
        with wrap_errors():
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")  # validated above
            conn.execute("PRAGMA foreign_keys=ON")
            # Statement journals and the claim's TEMP table in memory, not in temp files: a
            # write that follows others in a group-commit transaction journals the pages
            # they dirtied, and on files that made the claim script ~2x slower (bench/README.md,
            # "SQLite: temp_store=MEMORY").
            conn.execute("PRAGMA temp_store=MEMORY")
        with self._lock:
            self._conns.append(conn)
        return conn

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection, for reads."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._open()
        if not self._migrated:
            self._migrated = True
            self.migrate()
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        # Group commit. Threads of this process queue on the writer lock (SQLite's own
        # busy handler backs off with sleeps of up to 100 ms, which would dominate a step;
        # other processes' groups queue on the file lock, _filelock). The queued writes
        # share one transaction, each after the first in a SAVEPOINT of its own, and the
        # write that finds nobody queued behind it COMMITs for all of them: one fsync per
        # group, not per write. No write returns before the COMMIT that carries it is
        # durable.
        conn = self._writing()
        with self._queue:
            self._queued += 1
        self._writer.acquire()
        with self._queue:
            self._queued -= 1
        if self._closed.is_set():
            self._end_group(conn)
            self._writer.release()
            raise _closed_error()
        group, entered, before = self._group, False, dict(self._appended)
        first = group is None
        try:
            # wrap_errors covers the write itself: a driver error anywhere (busy beyond
            # busy_timeout, disk full, I/O) is the database's, a StoreError, never the
            # instance's fault.
            with wrap_errors():
                if group is None:
                    # This process's turn among the file's writers (_filelock), held until
                    # the group's COMMIT or ROLLBACK: StoreError after busy_timeout.
                    self._writers.take()
                    try:
                        conn.execute("BEGIN IMMEDIATE")  # the file's write lock, up front
                    except BaseException:
                        self._writers.give()
                        raise
                    group = self._group = _Group()
                else:
                    # Its failure must undo only itself: the group's earlier writes stand.
                    # The first write needs no savepoint (two statements fewer for a
                    # write alone): the transaction holds nothing else, and its failure
                    # rolls the whole of it back.
                    conn.execute("SAVEPOINT swf_write")
                entered = True
                yield conn
                if not first:
                    conn.execute("RELEASE swf_write")
        except BaseException:
            lost = entered and (first or not self._undo(conn, before))
            self._leave(conn, group, lost=lost)
            raise
        self._leave(conn, group)
        group.wait()

    def _undo(self, conn: sqlite3.Connection, before: dict[str, int]) -> bool:
        """Roll back the failed write's savepoint (the group's earlier writes stand);
        False when that is not possible and the whole transaction must go."""
        self._appended.clear()
        self._appended.update(before)
        if not _in_transaction(conn):  # the error ended the transaction (SQLite does, some)
            return False
        try:
            conn.execute("ROLLBACK TO swf_write")
            conn.execute("RELEASE swf_write")
        except sqlite3.Error:
            return False
        return True

    def _leave(self, conn: sqlite3.Connection, group: _Group | None, *, lost: bool = False) -> None:
        """Hand the writer lock on; COMMIT the group first if this write is its last:
        nobody queued behind it, the group full, or its transaction lost to an error."""
        appended: dict[str, int] = {}
        try:
            if group is None:  # BEGIN failed: there is no transaction
                return
            group.size += 1
            if lost or not _in_transaction(conn):
                group.error = group.error or StoreError(
                    "sqlite: another write in the same transaction ended it with an error; "
                    "nothing of this write was committed"
                )
            if group.error is not None or self._queued == 0 or group.size >= _GROUP_MAX:
                self._group = None
                appended = self._commit(conn, group)
        finally:
            self._writer.release()
        self._publish(appended)

    def _publish(self, appended: dict[str, int]) -> None:
        """Tell live watchers of a group's events, once its COMMIT is durable."""
        for instance_id, seq in appended.items():
            self._live.publish(instance_id, seq)

    def _commit(self, conn: sqlite3.Connection, group: _Group) -> dict[str, int]:
        """COMMIT (or roll back a lost) group and release its writers; the events it
        appended when it committed."""
        appended = dict(self._appended)
        self._appended.clear()
        try:
            if group.error is None:
                with wrap_errors():
                    conn.execute("COMMIT")
        except Exception as exc:
            group.error = exc
        finally:
            # A failed COMMIT leaves the transaction open: the connection must leave here
            # outside any transaction. The group's writers are released whatever happens
            # (a closed connection included), or they would wait forever.
            try:
                if _in_transaction(conn):
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
            finally:
                self._writers.give()
                group.done.set()
        return appended if group.error is None else {}

    def _end_group(self, conn: sqlite3.Connection) -> None:
        """Under the writer lock, with the store closing: COMMIT the group a write left
        open for a writer queued behind it (its writers wait for that COMMIT)."""
        group, self._group = self._group, None
        if group is not None:
            self._publish(self._commit(conn, group))

    def _writing(self) -> sqlite3.Connection:
        """The process's one write connection: every thread's writes run on it, behind
        the writer lock."""
        conn = self._wconn
        if conn is None:
            self._conn()  # the first connection applies the migrations
            conn = self._open()
            with wrap_errors():
                conn.create_function("swf_live_note", 2, self._note, deterministic=False)
                for statement, _, _ in _SCRIPTS["claim_scratch"]:  # the claim's TEMP table
                    conn.execute(statement)
            with self._lock:  # two threads' first writes: one connection wins
                if self._wconn is None:
                    self._wconn = conn
                conn = self._wconn
        return conn

    def _start_live(self) -> None:
        """Before a live subscription is made: the watch of other processes' commits up,
        and this process's own commits noted.

        A TEMP trigger on the write connection (per connection, so other tools writing
        the file need no function of ours) notes the events each write appends, and the
        commit publishes them (_commit). It is made on the first subscription, not with
        the connection: a call from SQLite into Python for every event cost a process
        that nobody watches 5% of its steps (bench/README.md, "SQLite: events noted only
        for a watcher"). Made in a write of its own, so every write before it has
        committed when this returns, and the subscriber's first read sees it; every
        write after it is noted.
        """
        self._start_watching()
        if self._noting:
            return
        with self._write() as conn:
            conn.execute(
                "CREATE TEMP TRIGGER IF NOT EXISTS swf_live_note AFTER INSERT ON "
                "main.wf_events BEGIN SELECT swf_live_note(NEW.instance_id, NEW.seq); END"
            )
        self._noting = True

    def _stop_live(self) -> None:
        """The last live subscription left: the trigger goes, and with it the call into
        Python per event. Dropped in a write of its own, as it was made; the hub calls
        this and ``_start_live`` under one lock, so a subscriber arriving meanwhile makes
        it again after this. If the drop fails (the database is unavailable, say) the trigger
        stays, noting events nobody reads: it costs time, never an event."""
        if not self._noting or self._closed.is_set():
            return
        try:
            with self._write() as conn:
                conn.execute("DROP TRIGGER IF EXISTS temp.swf_live_note")
        except StoreError as exc:
            log.debug("live note trigger kept: %s", exc)
            return
        self._noting = False

    def _note(self, instance_id: str, seq: int) -> None:
        self._appended[instance_id] = seq  # published after the COMMIT (see _commit)

    # -- the primitives of SqlStore ------------------------------------------------------
    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        # Counted, so that close() closes no connection under a read: Python's sqlite3
        # takes the interpreter down when a connection closes under a thread inside it.
        # A plain lock, not a Condition (whose Python-level enter and notify cost a read
        # twice as much); the last read to leave a closing store tells close().
        with self._counting:
            if self._closed.is_set():
                raise _closed_error()
            self._reads += 1
        try:
            with wrap_errors():
                yield self._conn()
        finally:
            with self._counting:
                self._reads -= 1
                if self._reads == 0 and self._closed.is_set():
                    self._idle.set()

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._write()

    def _run(self, conn: sqlite3.Connection, name: str, params: dict[str, Any]) -> _Result:
        # A query may be a short script: its statements run in order (in the caller's
        # transaction), and the last one's rows are the result.
        # A statement guarded by a parameter that is not set is skipped (guarded_statements);
        # the last one is the result, and runs.
        *head, (last, _, _) = _SCRIPTS[name]
        for statement, guard, sets in head:
            if guard is None or params[guard]:
                cursor = conn.execute(statement, params)
                if sets is not None:  # a probe: its value is a parameter from here on
                    params = {**params, sets: cursor.fetchone()[0]}
        return _Result(conn.execute(last, params))

    def _run_decision(
        self, conn: sqlite3.Connection, names: Sequence[str], params: dict[str, Any]
    ) -> sqlite3.Row | dict[str, int] | None:
        (first, _, _), *rest = [statement for name in names for statement in _SCRIPTS[name]]
        # The CAS: under the writer lock (BEGIN IMMEDIATE) the version cannot move between
        # this statement and the next, so checking its count here gates the whole script.
        if conn.execute(first, params).rowcount != 1:
            return None
        rows: list[sqlite3.Row] = []
        for statement, guard, sets in rest:
            if guard is None or params[guard]:
                rows = conn.execute(statement, params).fetchall()
                if sets is not None:  # a probe: its value is a parameter from here on
                    params = {**params, sets: rows[0][0]}
                    rows = []
        # A DAG tail ends in a SELECT of what it did; a state machine's tails return
        # nothing, and the CAS having passed, the new version is the one after it.
        return rows[0] if rows else {"version": params["version"] + 1}

    def _encode(self, value: Any) -> str:
        return dumps(value)

    def _array(self, values: Sequence[Any]) -> str:
        return json.dumps(list(values))  # read back with json_each

    def _made_due(self) -> None:
        self.nudge()

    def _kind_conflict(self, exc: Exception) -> bool:
        # RAISE(ABORT) in the triggers of migration 011: an IntegrityError with their text.
        return isinstance(exc, sqlite3.IntegrityError) and "type is registered as a" in str(exc)

    def live_hub(self) -> LiveHub:
        return self._live

    def _live_watch(self, sub: Subscription) -> None:
        # As on PostgreSQL (whose registration row needs the instance): a subscription to
        # an instance that does not exist is refused at once, not left waiting forever.
        if self.get(sub.instance_id) is None:
            raise NotFound(f"no workflow instance {sub.instance_id!r}")

    def close(self) -> None:
        """Close every connection once no thread is inside one; any call after it raises
        :class:`StoreError`.

        Reads under way finish and writes under way commit first: close takes the writer
        lock, after the write holding it (and commits a group that write left open for a
        writer queued behind it, whose write then finds the store closed). Python's
        sqlite3 takes the interpreter down when a connection closes under a thread inside
        it (a head watcher waking instances during a test's teardown did, in CI).
        """
        self._closed.set()
        if self._watcher is not None:
            self._watcher.join(timeout=2)
            self._watcher = None
        with self._counting:  # a read entered before the flag leaves after it, and tells
            if self._reads == 0:
                self._idle.set()
        self._idle.wait()
        with self._writer:
            if self._wconn is not None:
                self._end_group(self._wconn)
            with self._lock:
                for conn in self._conns:
                    conn.close()
                self._conns.clear()
        self._writers.close()
        self._noting = False  # the trigger went with the connection

    def _watch(self) -> None:
        # Other processes' commits, through PRAGMA data_version (a shared-memory read, no
        # query): each change wakes one worker.
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, check_same_thread=False)
        try:
            seen = conn.execute("PRAGMA data_version").fetchone()[0]
            self._watching.set()
            self._live.publish_all()  # what committed before that first read
            while not self._closed.wait(0.005):
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != seen:
                    seen = version
                    self._foreign_commit()
                    self._live.publish_all()  # another process may have appended events
        except sqlite3.Error:
            log.exception("sqlite watcher stopped; workers fall back to their due-time sleeps")
        finally:
            self._watching.set()  # nobody waits for a watch that will not come
            conn.close()

    def _foreign_commit(self) -> None:
        """Another connection committed: wake a worker only if that may have made work due
        before the threads asleep wake on their own.

        Most commits of other processes make nothing due that anybody here waits for (a
        step moving on under its own lease, a DAG node handed to the worker that committed
        it, a heartbeat), and each one woke an idle worker here to claim in vain: a write
        transaction, which every other writer waits for. A due time sooner than the
        soonest sleeper of its types wakes, or an answer that cannot be read, still wakes
        one. The read follows the data_version change, so it sees that commit and every
        one before it; a later commit changes data_version again. A sleeper that wakes on
        its own, before a due time that was not worth a wake-up, reads that due time again
        and sleeps until it (the timer holder, runtime/idle.py). With nobody asleep the
        nudge is remembered, as always: a worker between its claim and its sleep read its
        due times before this commit, and its next wait returns at once.
        """
        sleeps = self._wakeup.sleeps()
        if not sleeps:
            self.nudge()
            return
        now = time.monotonic()
        for types, until in sleeps.items():
            try:
                # A sleeper that claims every type (no types given) is always woken.
                due = self.next_due(types=sorted(types)) if types else 0.0
            except StoreError:
                due = 0.0
            if due is not None and due < until - now:
                self._wakeup.nudge(types)
                return

    # -- schema -----------------------------------------------------------------------
    def migrate(self, on_migration: Callable[[int, int], None] | None = None) -> int:
        self._migrated = True
        conn = self._conn()

        def run_script(script: str) -> None:
            for statement in split_statements(script):
                conn.execute(statement)

        try:
            conn.execute("BEGIN IMMEDIATE")
            version = self._migrate_on(conn, run_script, on_migration)
            conn.execute("COMMIT")
        except SchemaTooNew:
            conn.execute("ROLLBACK")
            raise
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise MigrationError(f"sqlite migration failed: {exc}") from exc
        return version
