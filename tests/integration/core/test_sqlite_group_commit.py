"""SQLite group commit: the writes queued in one process share a COMMIT, each returns only
once that COMMIT is done, and one write's failure costs only that write (or, when it ends
the whole transaction, fails every write of the group, none half-kept)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from statemachine_wf.errors import StoreError
from statemachine_wf.stores.sqlite import SQLiteStore
from tests.integration.core.group_threads import in_thread


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(str(tmp_path / "swf.db"))
    s.migrate()
    with sqlite3.connect(s.path) as setup:
        setup.execute("CREATE TABLE t (x INTEGER)")
    yield s
    s.close()


def rows(store: SQLiteStore) -> list[int]:
    """What another connection sees: only committed rows."""
    with sqlite3.connect(store.path) as other:
        return sorted(x for (x,) in other.execute("SELECT x FROM t"))


def commits(store: SQLiteStore) -> list[str]:
    """COMMITs the store's write connection runs, from now on."""
    seen: list[str] = []
    store._writing().set_trace_callback(
        lambda sql: seen.append(sql) if sql.strip().upper() == "COMMIT" else None
    )
    return seen


def queued(store: SQLiteStore, n: int) -> None:
    deadline = time.monotonic() + 10
    while store._queued < n:  # the others are waiting for the writer lock
        assert time.monotonic() < deadline, f"{store._queued} of {n} writers queued"
        time.sleep(0.001)


def test_queued_writes_share_one_commit_and_a_failed_one_is_undone_alone(
    store: SQLiteStore,
) -> None:
    seen = commits(store)
    first_inside = threading.Event()
    first_out: list[list[int]] = []

    def first() -> None:
        with store._write() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            first_inside.set()
            queued(store, 2)  # the two below wait behind this write: one group of three
        first_out.append(rows(store))  # back only once the group's COMMIT is done

    def failing() -> None:
        first_inside.wait(10)
        with store._write() as conn:
            conn.execute("INSERT INTO t VALUES (2)")
            raise ValueError("this write's own problem")

    def third() -> None:
        first_inside.wait(10)
        with store._write() as conn:
            conn.execute("INSERT INTO t VALUES (3)")

    started = [in_thread(fn) for fn in (first, failing, third)]
    for thread, _ in started:
        thread.join(20)
    errors = [e for _, errs in started for e in errs]
    assert [type(e) for e in errors] == [ValueError]
    assert rows(store) == [1, 3]
    assert first_out == [[1, 3]]
    assert len(seen) == 1  # three writes, one COMMIT


def grouped(
    store: SQLiteStore,
    second: Callable[[sqlite3.Connection], None],
    *,
    first_raises: Exception | None = None,
) -> tuple[list[BaseException], list[BaseException]]:
    """A first write (row 1) that holds its group open until a second write queues behind
    it, then raises ``first_raises`` if given, and that second write (``second`` runs
    inside it); the errors each one raised."""
    first_inside = threading.Event()

    def first() -> None:
        with store._write() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            first_inside.set()
            queued(store, 1)
            if first_raises is not None:
                raise first_raises

    def then() -> None:
        first_inside.wait(10)
        with store._write() as conn:
            second(conn)

    (a, a_errors), (b, b_errors) = in_thread(first), in_thread(then)
    a.join(20)
    b.join(20)
    assert not a.is_alive(), "the first write of the group never returned"
    assert not b.is_alive(), "the second write never returned"
    return a_errors, b_errors


def test_an_error_that_ends_the_transaction_fails_every_write_of_its_group(
    store: SQLiteStore,
) -> None:
    def ending(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (2)")
        conn.execute("ROLLBACK")  # as SQLite does on some errors (full disk, I/O)
        raise sqlite3.OperationalError("disk I/O error")

    a_errors, b_errors = grouped(store, ending)
    assert [type(e) for e in b_errors] == [StoreError]  # its own error, translated
    assert [type(e) for e in a_errors] == [StoreError]
    assert "nothing of this write was committed" in str(a_errors[0])
    assert rows(store) == []
    # The connection is outside any transaction again: the next write commits alone.
    with store._write() as conn:
        conn.execute("INSERT INTO t VALUES (4)")
    assert rows(store) == [4]


def test_a_write_alone_commits_at_once(store: SQLiteStore) -> None:
    seen = commits(store)
    with store._write() as conn:
        conn.execute("INSERT INTO t VALUES (1)")
    assert rows(store) == [1]
    assert len(seen) == 1


def test_a_failed_first_write_is_rolled_back_and_the_write_queued_behind_commits(
    store: SQLiteStore,
) -> None:
    # The group's first write runs without a savepoint (the transaction holds nothing
    # else): its failure rolls the transaction back, and the write that queued behind it
    # starts a group of its own.
    statements: list[str] = []
    store._writing().set_trace_callback(statements.append)

    def second(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (2)")

    a_errors, b_errors = grouped(
        store, second, first_raises=ValueError("the first write's own problem")
    )
    assert [type(e) for e in a_errors] == [ValueError]
    assert b_errors == []
    assert rows(store) == [2]
    assert not any("SAVEPOINT" in sql for sql in statements)  # each write was a first


def test_a_connection_closed_under_a_group_releases_its_writers_with_an_error(
    store: SQLiteStore,
) -> None:
    def closing(conn: sqlite3.Connection) -> None:
        conn.close()  # as a close() of the store racing its writers would

    a_errors, b_errors = grouped(store, closing)
    assert [type(e) for e in a_errors] == [StoreError]
    assert [type(e) for e in b_errors] == [StoreError]
    assert rows(store) == []


def test_statement_journals_and_temp_tables_are_kept_in_memory(store: SQLiteStore) -> None:
    """A write that follows others in a group's transaction journals the pages they
    dirtied; in temp files that made the claim script about twice as slow, so the write
    connection and the read connections keep them in memory (temp_store 2 = MEMORY)."""
    assert store._writing().execute("PRAGMA temp_store").fetchone()[0] == 2
    assert store._conn().execute("PRAGMA temp_store").fetchone()[0] == 2
