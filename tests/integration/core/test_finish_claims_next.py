"""The commit that ends an instance also claims the worker's next task (``apply_and_claim``):
a backlog runs on one claim statement, every step still started exactly once; a runner
that is stopping claims nothing in its last finish."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    Runner,
    RunnerOptions,
    Status,
    StepContext,
    Store,
    Workflow,
    step,
)
from statemachine_wf.core import decide
from statemachine_wf.core.store import Claim, Commit
from statemachine_wf.definition.events import Ev


class In(BaseModel):
    n: int = 0


class Two(Workflow[In, BaseModel]):
    workflow_type = "t.finish_claims.two.v1"

    @step(initial=True, to="second")
    def first(self, ctx: StepContext[In, BaseModel]) -> str:
        return "second"

    @step(to=COMPLETED)
    def second(self, ctx: StepContext[In, BaseModel]) -> None:
        return None


class Counting:
    """The real store; its claims and its finish-and-claims, counted by what they took."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def claim(self, **kwargs: Any) -> list[Claim]:
        claims = self.store.claim(**kwargs)
        self.calls["claim took" if claims else "claim empty"] += 1
        return claims

    def apply_and_claim(self, commit: Commit, **kwargs: Any) -> tuple[int, list[Claim]]:
        version, claims = self.store.apply_and_claim(commit, **kwargs)
        self.calls["finish took" if claims else "finish empty"] += 1
        return version, claims


def test_a_backlog_runs_on_one_claim_each_step_started_once(store: Store) -> None:
    client = Client(store, [Two])
    ids = [client.start(Two, In(n=n)) for n in range(6)]
    counting = Counting(store)
    Runner(
        counting,
        [Two],
        options=RunnerOptions(concurrency=1, idle_poll=0.2, reconcile_on_start=False),
    ).run_until_idle(timeout=30)
    for iid in ids:
        assert client.get(iid).status == Status.COMPLETED
        started = Counter(e.node for e in client.history(iid) if e.event_type == Ev.STEP_STARTED)
        assert started == {"first": 1, "second": 1}
    # The first instance came from a claim; each later one from its predecessor's finish;
    # the last finish found nothing due, so the worker did not claim again at once.
    assert counting.calls["claim took"] == 1
    assert counting.calls["finish took"] == 5
    assert counting.calls["finish empty"] == 1


class Held(Workflow[In, BaseModel]):
    workflow_type = "t.finish_claims.held.v1"
    inside = threading.Event()
    release = threading.Event()

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, BaseModel]) -> None:
        if ctx.input.n == 0:
            Held.inside.set()
            Held.release.wait(10)  # the runner is stopping while this step finishes
        return None


def test_a_stopping_runner_claims_nothing_in_its_last_finish(store: Store) -> None:
    Held.inside.clear()
    Held.release.clear()
    client = Client(store, [Held])
    first = client.start(Held, In(n=0))
    counting = Counting(store)
    runner = Runner(
        counting,
        [Held],
        options=RunnerOptions(concurrency=1, idle_poll=0.2, reconcile_on_start=False),
    )
    runner.start()
    try:
        assert Held.inside.wait(10)
        second = client.start(Held, In(n=1))  # due while the first step runs
        stopper = threading.Thread(target=runner.stop, kwargs={"timeout": 10})
        stopper.start()
        while not runner._stopping.is_set():
            threading.Event().wait(0.01)
        Held.release.set()
        stopper.join(15)
        assert not stopper.is_alive()
    finally:
        Held.release.set()
        runner.stop(timeout=10)
    assert client.get(first).status == Status.COMPLETED
    # Nothing of the second was taken: no lease, no intent, due for whoever runs next.
    assert [e.event_type for e in client.history(second)] == [Ev.CREATED]
    task = store.task(second)
    assert task is not None
    assert not task.leased
    assert counting.calls["finish took"] == 0


@pytest.mark.postgres
def test_postgres_finishes_and_claims_in_one_statement(pg_schema: str) -> None:
    """PostgreSQL: the finish and the claim after it are one statement, so one transaction:
    the ended instance's last event and the claimed instance's STEP_STARTED carry the same
    transaction time (``now()``). Two statements would give two times."""
    import psycopg

    from statemachine_wf.stores.postgres import PostgresStore
    from tests.plugins.stores import PG_DSN

    store = PostgresStore(PG_DSN, schema=pg_schema)
    try:
        client = Client(store, workflows=[Two])
        ending = client.start(Two, In(n=1))
        [claim] = store.claim(worker="w", types=[Two.workflow_type], lease=300)
        assert claim.instance.id == ending
        after = client.start(Two, In(n=2))
        d = decide.cancel(claim.instance.projection(in_flight=True), leased=False)
        _, claims = store.apply_and_claim(
            Commit(ending, claim.instance.version, d, "w"), types=[Two.workflow_type], lease=300
        )
        assert [c.instance.id for c in claims] == [after]
    finally:
        store.close()
    with psycopg.connect(PG_DSN, options=f"-c search_path={pg_schema}") as conn:
        times = conn.execute(
            "SELECT instance_id::text, event_type, created_at FROM wf_events"
            " WHERE (instance_id = %s AND seq = (SELECT max(seq) FROM wf_events"
            "                                   WHERE instance_id = %s))"
            "    OR (instance_id = %s AND event_type = %s)",
            (ending, ending, after, Ev.STEP_STARTED),
        ).fetchall()
    by = {(row[0], row[1]): row[2] for row in times}
    assert set(by) == {(ending, Ev.CANCELLED), (after, Ev.STEP_STARTED)}
    assert by[(ending, Ev.CANCELLED)] == by[(after, Ev.STEP_STARTED)]
