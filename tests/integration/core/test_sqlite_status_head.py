"""SQLite writes a decision's status with its head when the commit knows the status moves
(one UPDATE of the instance: queries.sql, ``apply_head_moved``), apart and only if it
changed when the commit does not know what it was decided on (``apply_head``'s status
statement), and not at all when the commit knows it is kept."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from statemachine_wf import Status
from statemachine_wf.core import decide
from statemachine_wf.core.records import Commit
from statemachine_wf.stores.sqlite import SQLiteStore
from tests.contract.helpers import started
from tests.integration.core.sqlite_trace import traced
from tests.integration.core.test_store_contract import new


@contextmanager
def _instance_updates(store: SQLiteStore) -> Iterator[list[str]]:
    """The UPDATEs of wf_instances the store's write connection runs meanwhile."""
    with traced(store) as seen:
        yield seen
    seen[:] = [s for s in seen if s.lstrip().startswith("UPDATE wf_instances")]


@pytest.mark.parametrize(
    ("knows", "status_set"),
    [(True, ["with the head"]), (False, ["apart"])],
)
def test_a_moving_status_is_written_once(
    sqlite_store: SQLiteStore, knows: bool, status_set: list[str]
) -> None:
    rec = sqlite_store.get(new(sqlite_store))
    assert rec is not None
    assert rec.status == Status.PENDING
    d = decide.cancel(rec.projection(), leased=False)
    assert d.state.status == Status.CANCELLED
    commit = Commit(rec.id, rec.version, d, None, status=rec.status if knows else None)
    with _instance_updates(sqlite_store) as seen:
        sqlite_store.apply(commit)
    where = ["with the head" if "version = version + 1" in s else "apart" for s in seen
             if "status = 'CANCELLED'" in s]  # fmt: skip
    assert where == status_set, seen
    assert len(seen) == (1 if knows else 2), seen
    after = sqlite_store.get(rec.id)
    assert after is not None
    assert after.status == Status.CANCELLED
    assert after.version == rec.version + 1


def test_a_kept_status_known_to_the_commit_is_not_written(sqlite_store: SQLiteStore) -> None:
    rec = started(sqlite_store).instance
    assert rec.step is not None
    d = decide.saved(rec.projection(), rec.step, rec.step_attempts, {"n": 1})  # RUNNING kept
    assert d.state.status == rec.status == Status.RUNNING
    with _instance_updates(sqlite_store) as seen:
        sqlite_store.apply(Commit(rec.id, rec.version, d, "w", status=rec.status))
    assert len(seen) == 1, seen
    assert not re.search(r"[ ,]status =", seen[0]), seen
    after = sqlite_store.get(rec.id)
    assert after is not None
    assert (after.status, after.progress) == (Status.RUNNING, {"n": 1})
