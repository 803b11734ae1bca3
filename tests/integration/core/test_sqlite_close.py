"""Closing a SQLite store under threads still using it: reads and writes under way finish
(a write's group commits), every call after the close raises StoreError, and nothing
crashes. Python's sqlite3 takes the interpreter down when a connection closes under a
thread inside it; a head watcher waking instances during a test's teardown did, in CI."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from statemachine_wf.errors import StoreError
from statemachine_wf.stores.sqlite import SQLiteStore
from tests.integration.core.group_threads import in_thread


def made(tmp_path: Path) -> SQLiteStore:
    s = SQLiteStore(str(tmp_path / "swf.db"))
    s.migrate()
    with sqlite3.connect(s.path) as setup:
        setup.execute("CREATE TABLE t (x INTEGER)")
    return s


def rows(path: str) -> list[int]:
    with sqlite3.connect(path) as other:
        return sorted(x for (x,) in other.execute("SELECT x FROM t"))


def close_under(
    store: SQLiteStore,
    enter: Callable[[], AbstractContextManager[sqlite3.Connection]],
    then: Callable[[sqlite3.Connection], object],
) -> None:
    """A thread enters the store (``enter``: a read or a write) and, once the store is
    closing, does ``then`` there: close must not return before it has left, and neither
    may fail."""
    inside, go_on = threading.Event(), threading.Event()

    def use() -> None:
        with enter() as conn:
            inside.set()
            assert go_on.wait(10)
            then(conn)

    user, use_errors = in_thread(use)
    assert inside.wait(10)
    closer, close_errors = in_thread(store.close)
    time.sleep(0.2)
    assert closer.is_alive(), "close returned under a thread inside the store"
    go_on.set()
    for thread in (user, closer):
        thread.join(10)
        assert not thread.is_alive()
    assert use_errors == []
    assert close_errors == []


def test_close_waits_for_a_write_under_way_and_refuses_every_call_after(tmp_path: Path) -> None:
    store = made(tmp_path)
    close_under(store, store._write, lambda conn: conn.execute("INSERT INTO t VALUES (1)"))
    assert rows(store.path) == [1]  # the write under way committed

    with pytest.raises(StoreError, match="store is closed"), store._write() as conn:
        conn.execute("INSERT INTO t VALUES (2)")
    with pytest.raises(StoreError, match="store is closed"):
        store.get("anything")
    assert rows(store.path) == [1]
    store.close()  # twice is harmless


def test_close_waits_for_a_read_under_way(tmp_path: Path) -> None:
    store = made(tmp_path)
    seen: list[int] = []
    close_under(
        store,
        store._reading,
        lambda conn: seen.append(conn.execute("SELECT count(*) FROM t").fetchone()[0]),
    )
    assert seen == [0]


@pytest.mark.parametrize("round_", range(5))
def test_a_group_left_open_for_a_queued_writer_commits_when_the_store_closes(
    tmp_path: Path, round_: int
) -> None:
    # The first write leaves its group open for the writer queued behind it; close takes
    # the writer lock either before that writer (and commits the group, the writer then
    # finding the store closed) or after it (the writer commits both). Never a write lost
    # in an uncommitted group, never a writer left waiting.
    store = made(tmp_path)
    inside, go_on = threading.Event(), threading.Event()

    def first() -> None:
        with store._write() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            inside.set()
            assert go_on.wait(10)

    def second() -> None:
        with store._write() as conn:
            conn.execute("INSERT INTO t VALUES (2)")

    one, first_errors = in_thread(first)
    assert inside.wait(10)
    two, second_errors = in_thread(second)
    deadline = time.monotonic() + 10
    while store._queued < 1:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    closer, close_errors = in_thread(store.close)
    time.sleep(0.05)
    go_on.set()
    for thread in (one, two, closer):
        thread.join(10)
        assert not thread.is_alive()
    assert first_errors == []
    assert close_errors == []
    if second_errors:
        assert isinstance(second_errors[0], StoreError), second_errors
        assert "store is closed" in str(second_errors[0])
        assert rows(store.path) == [1]
    else:
        assert rows(store.path) == [1, 2]


STRESS = textwrap.dedent(
    """
    import sys, threading
    from statemachine_wf.errors import StoreError
    from statemachine_wf.stores.sqlite import SQLiteStore

    store = SQLiteStore(sys.argv[1])
    store.migrate()
    errors = []

    def use(n):
        try:
            while True:
                store.get(f"none-{n}")
                store.wake_instances([f"none-{n}"])
        except StoreError as exc:
            if "store is closed" not in str(exc):
                errors.append(exc)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=use, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    threading.Event().wait(0.3)
    store.close()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    print("errors", errors)
    sys.exit(1 if errors else 0)
    """
)


@pytest.mark.parametrize("round_", range(3))
def test_closing_under_busy_threads_crashes_nothing(tmp_path: Path, round_: int) -> None:
    # In a child process: a crash would take pytest down with it.
    done = subprocess.run(
        [sys.executable, "-c", STRESS, str(tmp_path / "swf.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
