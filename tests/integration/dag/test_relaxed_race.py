"""PostgreSQL: a vouched DAG completion (``DagCommit.blockers``) that waits for the
instance row of a commit settling its last blocker is refused once that commit is in.

The statement's snapshot is taken before it waits, so it still sees the blocker's task the
other commit deletes; only the lock it takes on the task once the instance row is its own
reads the row's latest version (``dag_head_relaxed`` in queries.sql). Read from the
snapshot instead, the completion would commit "the join still waits" after the join's
last other input had completed, and the join would never run. The other commit is held in
an open transaction of the test's, so the timing is the test's, not the scheduler's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from statemachine_wf import ConcurrencyConflict
from statemachine_wf.core.store import DagApplied
from statemachine_wf.stores.postgres import PostgresStore
from tests.contract import test_dag_relaxed as relaxed
from tests.plugins.stores import PG_DSN

from . import helpers as h


@pytest.fixture
def admin(pg_store: PostgresStore, pg_schema: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection of the test's own, in an open transaction (not autocommit)."""
    with psycopg.connect(PG_DSN, options=f"-c search_path={pg_schema}") as conn:
        yield conn


def committing_while_held(
    pg_store: PostgresStore, admin: psycopg.Connection[Any], *, settle_blocker: bool
) -> dict[str, Any]:
    """b1's completion, vouched for by b0 alone, sent while ``admin`` holds the instance
    row as another runner's commit would (the version moved on; with ``settle_blocker``
    b0's task deleted too, b0 completing); then ``admin`` commits. What the store said."""
    h.shared_at_once(pg_store)  # the branches are claimed by two runners at once
    iid, claims = relaxed.branches(pg_store)
    b1 = replace(relaxed.vouched(pg_store, claims["b1"]), blockers=("b0",))
    admin.execute("UPDATE wf_instances SET version = version + 1 WHERE id = %s", (iid,))
    if settle_blocker:
        admin.execute("DELETE FROM wf_tasks WHERE instance_id = %s AND slot = 'b0'", (iid,))
    out: dict[str, Any] = {}

    def commit() -> None:
        try:
            out["applied"] = pg_store.dag_commit(b1)
        except ConcurrencyConflict as exc:
            out["conflict"] = exc

    thread = threading.Thread(target=commit, daemon=True)
    thread.start()
    with psycopg.connect(PG_DSN, autocommit=True) as probe:
        deadline = time.monotonic() + 10
        while True:  # until the commit waits for the row admin holds
            waiting = probe.execute(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'"
            ).fetchone()
            if waiting is not None and waiting[0] > 0:
                break
            assert time.monotonic() < deadline, "the commit never waited for the held row"
            time.sleep(0.01)
    assert thread.is_alive()
    admin.commit()
    thread.join(timeout=10)
    assert not thread.is_alive()
    out["events"] = [(e.event_type, e.node) for e in pg_store.events(iid)]
    return out


def test_a_blocker_settled_by_the_commit_waited_for_does_not_vouch(
    pg_store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    out = committing_while_held(pg_store, admin, settle_blocker=True)
    assert "conflict" in out, out
    assert ("NODE_COMPLETED", "b1") not in out["events"]


def test_a_blocker_still_open_after_the_commit_waited_for_vouches(
    pg_store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    out = committing_while_held(pg_store, admin, settle_blocker=False)
    assert isinstance(out.get("applied"), DagApplied), out
    assert ("NODE_COMPLETED", "b1") in out["events"]
