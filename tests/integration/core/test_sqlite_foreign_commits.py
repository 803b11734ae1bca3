"""SQLite hears other processes' commits through ``PRAGMA data_version``; a commit wakes an
idle worker only if it may have made work due before that worker would wake on its own.

Every foreign commit used to wake one: in a DAG chain on four processes, each node's commit
woke an idle worker in each of the other three, to claim in vain (a write transaction every
writer waits for; bench/README.md, "Session 36"). Two store objects on one file stand for
two processes here: each has its own connections and its own watcher.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from statemachine_wf.stores.sqlite import SQLiteStore
from tests.integration.core.test_store_contract import new

TYPE = "c.thing.v1"


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[SQLiteStore, SQLiteStore]]:
    path = str(tmp_path / "swf.db")
    here, there = SQLiteStore(path), SQLiteStore(path)
    here.migrate()
    yield here, there
    here.close()
    there.close()


def _asleep(store: SQLiteStore, sleep: float) -> tuple[threading.Thread, list[bool]]:
    """A worker of TYPE asleep on ``store`` for up to ``sleep`` s: (its thread, [woken])."""
    result: list[bool] = []

    def worker() -> None:
        assert store.wait_for_work(sleep, types=[TYPE])  # a first wait returns at once
        result.append(store.wait_for_work(sleep, types=[TYPE]))

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while store._wakeup.sleeping == 0 and thread.is_alive():
        assert time.monotonic() < deadline, "the worker never went to sleep"
        time.sleep(0.005)
    return thread, result


def test_foreign_commits_that_make_nothing_due_sooner_wake_nobody(
    two: tuple[SQLiteStore, SQLiteStore],
) -> None:
    here, there = two
    new(here, delay=3600)  # something due in an hour: the worker sleeps its 1.5 s
    thread, woken = _asleep(here, 1.5)
    commits = 0
    while thread.is_alive():
        new(there, delay=3600)  # each one a commit this store hears of
        claims = there.claim(worker="there", types=[TYPE], lease=300)  # and a write: none
        assert claims == []
        commits += 2
        thread.join(0.05)
    assert commits >= 4
    assert woken == [False], "a commit that made nothing due woke the worker"


@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_a_foreign_commit_that_makes_work_due_sooner_wakes_a_sleeper(
    two: tuple[SQLiteStore, SQLiteStore], delay: float
) -> None:
    here, there = two
    new(here, delay=3600)
    thread, woken = _asleep(here, 120)
    iid = new(there, delay=delay)  # due before the sleeper's 120 s run out
    thread.join(60)
    assert woken == [True]
    time.sleep(delay)
    assert [c.instance.id for c in here.claim(worker="here", types=[TYPE], lease=300)] == [iid]


def test_a_foreign_commit_wakes_a_sleeper_that_claims_every_type(
    two: tuple[SQLiteStore, SQLiteStore],
) -> None:
    here, there = two
    result: list[bool] = []

    def worker() -> None:
        assert here.wait_for_work(120)  # no types: whatever is due
        result.append(here.wait_for_work(120))

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    while here._wakeup.sleeping == 0 and thread.is_alive():
        time.sleep(0.005)
    new(there, delay=3600)
    thread.join(60)
    assert result == [True]
