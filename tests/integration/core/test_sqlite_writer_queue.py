"""SQLite: the processes writing one file queue on an ``flock`` of ``<file>-swf.lock``
(``stores/_filelock.py``), held from a group's BEGIN to its COMMIT or ROLLBACK, instead of
the busy handler's sleeps. A killed holder leaves nothing locked; where the lock file
cannot be had, the store writes as before."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from statemachine_wf.errors import StoreError
from statemachine_wf.stores._filelock import WriterQueue
from statemachine_wf.stores.sqlite import SQLiteStore


@pytest.fixture
def store(sqlite_store: SQLiteStore) -> SQLiteStore:
    return sqlite_store  # tests/plugins/stores.py: a migrated store on tmp_path/swf.db


def held(lock_file: str) -> bool:
    """Whether some open file description holds the lock: another one's try fails."""
    fd = os.open(lock_file, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # a lock this try took goes with it
    return False


def test_a_write_holds_the_lock_from_begin_to_commit(store: SQLiteStore) -> None:
    lock_file = store.path + "-swf.lock"
    with store._write() as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
        assert held(lock_file)  # inside the transaction
    assert not held(lock_file)  # given back with the COMMIT
    # A failed write gives it back too (its group rolled back).
    with pytest.raises(Exception, match="no such table"), store._write() as conn:
        conn.execute("INSERT INTO missing VALUES (1)")
    assert not held(lock_file)
    # And the writes of the port take it the same way.
    store.register_types(["t.v1"], by="test")
    assert store.registered_types() == ["t.v1"]
    assert not held(lock_file)


def test_a_second_writer_waits_for_the_first_to_give_it_back(tmp_path: Path) -> None:
    first, second = WriterQueue(str(tmp_path / "a.db"), 30), WriterQueue(str(tmp_path / "a.db"), 30)
    first.take()
    assert held(first.path)
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from statemachine_wf.stores._filelock import WriterQueue as W; "
            "q = W(sys.argv[1], 30); print('taking', flush=True); q.take(); "
            "print('in', flush=True); q.give()",
            str(tmp_path / "a.db"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "taking"
        time.sleep(0.2)
        assert child.poll() is None  # blocked on the lock
        first.give()
        assert child.stdout.readline().strip() == "in"
        assert child.wait(timeout=10) == 0
    second.take()  # free again
    second.give()
    first.close()
    second.close()


def test_a_writer_waits_at_most_busy_timeout_then_fails_and_writes_nothing(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "t.db")
    store = SQLiteStore(db, busy_timeout=0.5)
    store.migrate()
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from statemachine_wf.stores._filelock import WriterQueue as W; "
            "q = W(sys.argv[1], 30); q.take(); print('held', flush=True); "
            "sys.stdin.readline(); q.give(); print('given', flush=True)",
            db,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdin is not None
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "held"
            t0 = time.monotonic()
            with pytest.raises(StoreError, match="database is locked: another process held"):
                store.register_types(["t.v1"], by="test")
            assert 0.4 <= time.monotonic() - t0 < 10  # busy_timeout, as SQLite's own wait
            assert store.registered_types() == []
            holder.stdin.write("go\n")
            holder.stdin.flush()
            assert holder.stdout.readline().strip() == "given"
            assert holder.wait(timeout=10) == 0
        finally:
            holder.kill()
    # The wait it gave up on let go of the lock once it had it: the next write goes in.
    store.register_types(["t.v1"], by="test")
    assert store.registered_types() == ["t.v1"]
    store.close()


def test_a_holder_killed_leaves_the_file_free(tmp_path: Path) -> None:
    db = str(tmp_path / "k.db")
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from statemachine_wf.stores._filelock import WriterQueue as W; "
            "q = W(sys.argv[1], 30); q.take(); print('held', flush=True); time.sleep(60)",
            db,
        ],
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "held"
            assert held(db + "-swf.lock")
            holder.send_signal(signal.SIGKILL)
            assert holder.wait(timeout=10) == -signal.SIGKILL
        finally:
            holder.kill()
    # The kernel dropped the dead process's lock: the next writer goes straight in.
    store = SQLiteStore(db)
    try:
        store.register_types(["t.v1"], by="test")
        assert store.registered_types() == ["t.v1"]
    finally:
        store.close()


def test_a_forked_child_takes_its_own_lock(tmp_path: Path) -> None:
    queue = WriterQueue(str(tmp_path / "f.db"), 30)
    queue.take()
    pid = os.fork()
    if pid == 0:  # the child: the inherited descriptor (the parent's lock) is let go
        code = 1
        try:
            gone = queue._fd is None
            fd = queue._open()
            code = 0 if gone and fd is not None and held(queue.path) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    queue.give()
    assert not held(queue.path)
    queue.close()


def test_a_holder_killed_mid_write_leaves_the_file_free_though_its_child_lives(
    tmp_path: Path,
) -> None:
    # A child forked while the parent held the lock inherits a descriptor of the same open
    # file description: kept open, it would hold a killed parent's lock for its own life.
    db = str(tmp_path / "c.db")
    script = (
        "import os, sys, time; from statemachine_wf.stores._filelock import WriterQueue as W\n"
        "q = W(sys.argv[1], 30); q.take()\n"
        "if os.fork() == 0:\n"  # the child speaks once it runs (past the fork hooks)
        "    print(os.getpid(), flush=True); time.sleep(60); os._exit(0)\n"
        "time.sleep(60)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script, db], stdout=subprocess.PIPE, text=True
    ) as holder:
        child = 0
        try:
            assert holder.stdout is not None
            child = int(holder.stdout.readline())
            assert held(db + "-swf.lock")
            holder.send_signal(signal.SIGKILL)
            assert holder.wait(timeout=10) == -signal.SIGKILL
            os.kill(child, 0)  # the child still lives
            assert not held(db + "-swf.lock")
        finally:
            holder.kill()
            if child:
                os.kill(child, signal.SIGKILL)


def test_a_contended_take_waits_in_a_thread_that_ends_when_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(WriterQueue, "IDLE", 0.05)
    queue = WriterQueue(str(tmp_path / "w.db"), 30)
    assert queue._open() is not None
    other = os.open(queue.path, os.O_RDONLY)  # another holder: its own file description
    try:
        for _ in range(2):  # the second time after the first waiter thread ended
            fcntl.flock(other, fcntl.LOCK_EX)
            threading.Timer(0.1, fcntl.flock, (other, fcntl.LOCK_UN)).start()
            t0 = time.monotonic()
            queue.take()  # contended: waits for the other to let go
            assert time.monotonic() - t0 >= 0.05
            assert held(queue.path)
            queue.give()
            deadline = time.monotonic() + 5
            while queue._turns is not None:  # the waiter thread ends when idle
                assert time.monotonic() < deadline
                time.sleep(0.01)
    finally:
        os.close(other)
        queue.close()


def test_without_the_lock_file_the_store_writes_as_before(tmp_path: Path) -> None:
    db = tmp_path / "n.db"
    (tmp_path / "n.db-swf.lock").mkdir()  # cannot be opened as the lock file
    store = SQLiteStore(str(db))
    try:
        store.register_types(["t.v1", "t.v2"], by="test")
        assert store.registered_types() == ["t.v1", "t.v2"]
        assert store._writers._off
    finally:
        store.close()
    # In memory: no file beside it to lock at all.
    assert WriterQueue(":memory:", 30)._open() is None
