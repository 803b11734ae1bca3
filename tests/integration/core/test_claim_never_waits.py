"""PostgreSQL: a claim never waits for an instance row another transaction holds, so a
claim and the commit of a lease that ran out cannot deadlock.

A commit (a continue, a finish) updates its instance row first and its task row second. A
claim that locked the task first and then waited for the instance row was the other half
of a deadlock: when a lease ran out while its holder was finishing, the claim took the
task as the finish ran, and each waited on the other until PostgreSQL broke the cycle a
second later with an error on one side. Now the claim locks a candidate's instance row
first and passes over a busy one, as the DAG claim does (migration 018); the start-up
claim of one instance waits for the instance row, holding nothing, then takes the task.

Each test holds the rows in an open transaction that does what a finish does, in the order
it does it, so the timing is the test's, not the scheduler's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from statemachine_wf import COMPLETED, Client, StepContext, Workflow, step
from statemachine_wf.stores.postgres import PostgresStore
from tests.plugins.stores import PG_DSN


class In(BaseModel):
    n: int = 0


class One(Workflow[In, BaseModel]):
    workflow_type = "t.claim_never_waits.one.v1"

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, BaseModel]) -> None:
        return None


TYPES = [One.workflow_type]


@pytest.fixture
def admin(pg_store: PostgresStore, pg_schema: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection of the test's own, in an open transaction (not autocommit)."""
    with psycopg.connect(PG_DSN, options=f"-c search_path={pg_schema}") as conn:
        conn.execute("SET lock_timeout = '5s'")  # a wait the fix removed fails, not hangs
        yield conn


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except Exception as exc:  # the test asserts there was none
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def finishing_after_its_lease_ran_out(
    pg_store: PostgresStore, admin: psycopg.Connection[Any]
) -> str:
    """An instance whose lease ran out while its holder finishes: ``admin``'s open
    transaction has done the finish's first write, the instance row (the CAS), and holds
    it; the task row, which the finish deletes next, is due again for any claim."""
    iid = Client(pg_store, [One]).start(One, In())
    [held] = pg_store.claim(worker="old", types=TYPES, lease=0.05)
    time.sleep(0.2)  # the lease runs out: the task is due again while "old" finishes
    admin.execute(
        "UPDATE wf_instances SET status = 'COMPLETED', version = version + 1"
        " WHERE id = %s AND version = %s",
        (iid, held.instance.version),
    )
    return iid


def test_a_claim_passes_over_a_due_task_whose_instance_row_is_held(
    pg_store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    client = Client(pg_store, [One])
    busy = client.start(One, In(n=1))
    admin.execute("SELECT 1 FROM wf_instances WHERE id = %s FOR NO KEY UPDATE", (busy,))
    # Held by a commit under way: the claim does not wait for it, it takes nothing.
    thread, out = in_thread(lambda: pg_store.claim(worker="w", types=TYPES, lease=30))
    thread.join(timeout=3)
    assert not thread.is_alive(), "the claim waited for an instance row another commit holds"
    assert out == {"value": []}
    # Another instance's due task is still taken meanwhile.
    free = client.start(One, In(n=2))
    [claim] = pg_store.claim(worker="w", types=TYPES, lease=30)
    assert claim.instance.id == free
    admin.rollback()
    [claim] = pg_store.claim(worker="w", types=TYPES, lease=30)
    assert claim.instance.id == busy


def test_a_claim_and_the_finish_of_a_lease_that_ran_out_do_not_deadlock(
    pg_store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    iid = finishing_after_its_lease_ran_out(pg_store, admin)
    thread, out = in_thread(lambda: pg_store.claim(worker="new", types=TYPES, lease=30))
    thread.join(timeout=3)
    assert not thread.is_alive(), "the claim waited for the finishing instance's row"
    # The finish deletes its task row next: not locked by the claim, so no cycle and no
    # error on either side.
    admin.execute("DELETE FROM wf_tasks WHERE instance_id = %s", (iid,))
    admin.commit()
    assert out == {"value": []}
    assert pg_store.task(iid) is None


def test_the_start_up_claim_waits_for_the_instance_row_holding_nothing(
    pg_store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    iid = finishing_after_its_lease_ran_out(pg_store, admin)
    thread, out = in_thread(
        lambda: pg_store.claim_instance(iid, worker="new", lease=30, incarnation="i")
    )
    time.sleep(0.5)  # long enough for the claim to reach its locks
    # The start-up claim waits for the instance row and holds no task lock meanwhile, so
    # the finish deletes its task at once, and the claim then finds nothing to take.
    admin.execute("DELETE FROM wf_tasks WHERE instance_id = %s", (iid,))
    admin.commit()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert out == {"value": None}
    assert pg_store.task(iid) is None
