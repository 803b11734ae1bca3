"""A statement the server aborts as a deadlock's victim runs again, when it was alone.

Alone (autocommit), a statement rolled back as a deadlock's victim has written nothing and
sent nothing, and running it again is running it for the first time. Before, its caller
got a StoreError: a step's commit handed the step back to be run again, and a group's
statement did that to every step it carried (docs/architecture.md, "Group commit on
PostgreSQL"). Here another transaction holds one of the rows the decision writes, lets the
decision's statement wait for it, and then asks for a row that statement already holds:
the server aborts the decision's statement after its ``deadlock_timeout`` (1 s; the other
transaction waits 30 s before it looks for a cycle, so it is never the victim).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from statemachine_wf import Status
from statemachine_wf.core import decide
from statemachine_wf.core.store import Claim, Commit
from statemachine_wf.stores.postgres import PostgresStore
from tests.contract.helpers import started
from tests.integration.core.row_locks import blocked_by, connect
from tests.integration.core.test_group_commit import ended, finishing
from tests.unit.core.workflows import ThreeSteps


def _wait_blocked(dsn: str, schema: str, holder_pid: int) -> None:
    if not blocked_by(dsn, schema, holder_pid):
        raise AssertionError("the decision's statement never waited for the held row")


def _deadlocked(
    dsn: str, schema: str, held: tuple[str, str], then: tuple[str, str], send: Callable[[], object]
) -> list[object]:
    """Hold the row ``held`` (table, instance id), run ``send`` on a thread until it waits
    for it, then take the row ``then`` that its statement holds: a cycle. The outcomes of
    ``send`` (its value, or what it raised)."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(send())
        except Exception as exc:
            outcome.append(exc)

    with connect(dsn, schema) as other:
        other.execute("SET LOCAL deadlock_timeout = '30s'")
        key = "id" if held[0] == "wf_instances" else "instance_id"
        other.execute(f"SELECT 1 FROM {held[0]} WHERE {key} = %s FOR UPDATE", (held[1],))
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        _wait_blocked(dsn, schema, other.info.backend_pid)
        key = "id" if then[0] == "wf_instances" else "instance_id"
        # Waits until the server has aborted the decision's statement (about a second).
        other.execute(f"SELECT 1 FROM {then[0]} WHERE {key} = %s FOR UPDATE", (then[1],))
        other.rollback()
    thread.join(30)
    assert not thread.is_alive()
    return outcome


def moved_on(claim: Claim) -> Commit:
    state = claim.instance.projection(in_flight=True)
    d = decide.success(ThreeSteps.spec(), state, "first", 1, "second", {})
    return Commit(claim.instance.id, claim.instance.version, d, "w")


def test_a_lone_decision_chosen_as_a_deadlocks_victim_commits_on_its_second_run(
    pg_dsn: str, pg_schema: str
) -> None:
    store = PostgresStore(pg_dsn, schema=pg_schema, group_min=0)  # every decision alone
    try:
        store.migrate()
        claim = started(store)
        commit = moved_on(claim)
        iid = claim.instance.id
        # The statement updates the instance row, then the task row (its CTEs read `inst`).
        [outcome] = _deadlocked(
            pg_dsn,
            pg_schema,
            ("wf_tasks", iid),
            ("wf_instances", iid),
            lambda: store.apply(commit),
        )
        assert outcome == commit.version + 1
        rec = store.get(iid)
        assert rec is not None
        assert (rec.version, rec.step) == (commit.version + 1, "second")
    finally:
        store.close()


def test_a_group_chosen_as_a_deadlocks_victim_commits_every_decision_it_carried(
    pg_dsn: str, pg_schema: str
) -> None:
    store = PostgresStore(pg_dsn, schema=pg_schema)
    try:
        store.migrate()
        running = sorted((started(store) for _ in range(2)), key=lambda c: c.instance.id)
        low, high = (c.instance.id for c in running)
        items = finishing(store, [ended(c) for c in running])
        # The group locks the instance rows down their primary key: the lower id first.
        [outcomes] = _deadlocked(
            pg_dsn,
            pg_schema,
            ("wf_instances", high),
            ("wf_instances", low),
            lambda: store._send_finishes(items),
        )
        assert isinstance(outcomes, list)
        assert not any(isinstance(o, BaseException) for o in outcomes), outcomes
        for iid in (low, high):
            rec = store.get(iid)
            assert rec is not None
            assert rec.status == Status.CANCELLED
    finally:
        store.close()
