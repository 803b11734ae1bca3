"""A runner of many threads works on a pool of one connection (PostgreSQL).

The pool's default is four connections for a runner of eight threads (docs/architecture.md,
"Connections"): a thread holds a connection only for a store call and waits for one when
all are busy. That is safe only while no path of the store holds one connection and waits
for a second; with every thread in such a path the runner would stall until the pool's
timeout, again and again. Here eight threads share one connection: state machines that
take a per-key lock and wait for each other, and DAG fan-outs whose branches commit side
by side, all end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    Runner,
    RunnerOptions,
    Status,
    StepContext,
    Workflow,
    step,
)
from statemachine_wf.dag import DagClient
from statemachine_wf.stores.postgres import PostgresStore
from tests.integration.dag import helpers as h


class In(BaseModel):
    n: int


class Pr(BaseModel):
    pass


class Locked(Workflow[In, Pr]):
    """Three steps, the second under a lock all of them share."""

    workflow_type = "t.small_pool.v1"

    @step(initial=True, to="held")
    def first(self, ctx: StepContext[In, Pr]) -> None:
        pass

    @step(to="last")
    def held(self, ctx: StepContext[In, Pr]) -> None:
        ctx.hold("signer:small-pool", recheck=1.0)

    @step(to=COMPLETED)
    def last(self, ctx: StepContext[In, Pr]) -> None:
        pass


@pytest.fixture(
    params=[{"pool_size": 1}, {"pool_size": 3, "runner_connections": 1}],
    ids=["pool-of-one", "a-share-of-one"],
)
def one_connection(
    pg_dsn: str, pg_schema: str, request: pytest.FixtureRequest
) -> Iterator[PostgresStore]:
    # No connection beyond the one either (dag_connections=0): DAG commits share it too.
    # Or the workers' share of the pool is one (runner_connections), the DAG commits apart.
    store = PostgresStore(
        pg_dsn, schema=pg_schema, dag_connections=0, pool_timeout=10, **request.param
    )
    store.migrate()
    yield store
    store.close()


def test_eight_threads_on_one_connection_run_state_machines_and_dags_to_the_end(
    one_connection: PostgresStore,
) -> None:
    client = Client(one_connection, [Locked])
    ids = [client.start(Locked, In(n=i)) for i in range(40)]
    dags = DagClient(one_connection)
    fans = [dags.start(h.fan_out(6), {"x": i}) for i in range(4)]
    runner = Runner(
        one_connection,
        [Locked],
        dags=h.registry,
        options=RunnerOptions(concurrency=8, idle_poll=0.2),
    )
    runner.start()
    try:
        for iid in ids:
            assert client.wait(iid, timeout=120).status == Status.COMPLETED
        for iid in fans:
            assert dags.wait(iid, timeout=120).status == Status.COMPLETED
    finally:
        runner.stop(timeout=30)
    assert one_connection.lock_holder("signer:small-pool") is None
