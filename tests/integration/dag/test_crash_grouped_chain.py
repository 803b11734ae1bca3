"""A DAG runner whose chains' node commits share statements (PostgreSQL group commit,
docs/architecture.md, "Group commit on PostgreSQL"), SIGKILLed in the middle of a run:
nothing lost, no node completed or dispatched twice, and no node run more than once
again.

A grouped statement is one transaction: the commits it carries land together or not at
all. A node whose commit did not land is run again by the heir once the victim's lease
runs out; a node handed to a victim's worker in a commit that landed was not run yet.
The victim did group: its ``NODE_COMPLETED`` events of several instances share one
transaction's ``now()``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from statemachine_wf import Status
from statemachine_wf.dag import DagClient
from statemachine_wf.stores.postgres import PostgresStore

from . import helpers as h
from .test_concurrency import _per_node, _wait_all, marked_linear

INSTANCES, DEPTH, THREADS = 16, 30, 8


def _grouped_by(store: PostgresStore, pid: int) -> int:
    """Transactions of ``pid``'s runner that completed nodes of several instances."""
    with store._conn() as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM (SELECT created_at FROM wf_events"
            " WHERE event_type = 'NODE_COMPLETED' AND worker LIKE %s"
            " GROUP BY created_at HAVING count(DISTINCT instance_id) > 1) AS g",
            (f"%:{pid}:%",),
        ).fetchone()
    assert row is not None
    return int(row["n"])


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.crash
def test_a_runner_killed_with_grouped_dag_commits_in_flight_loses_nothing(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    store = PostgresStore(pg_dsn, schema=pg_schema)
    store.migrate()
    marks = tmp_path / "marks.txt"
    try:
        client = DagClient(store)
        definition = marked_linear(DEPTH)
        ids = [client.start(definition, {"run": f"k{i}"}) for i in range(INSTANCES)]
        with h.runner_processes(
            pg_dsn, pg_schema, marks, count=1, concurrency=THREADS, lease=2.0
        ) as [victim]:
            # Killed once a third of the node runs are done: its eight threads are then
            # running nodes and committing them, several instances a statement.
            h.kill_when_marked(victim, marks, INSTANCES * DEPTH // 3)
        assert h.marked(marks) < INSTANCES * DEPTH, "the victim finished before its kill"
        assert _grouped_by(store, victim.pid) > 0, "the victim never grouped a statement"

        with h.runner_processes(pg_dsn, pg_schema, marks, count=1, concurrency=THREADS):
            _wait_all(client, ids, timeout=120)

        assert {client.get(i).status for i in ids} == {Status.COMPLETED}
        assert all(client.output(i) == {"last": f"n{DEPTH - 1}"} for i in ids)
        for event_type in ("NODE_DISPATCHED", "NODE_COMPLETED"):
            counts = _per_node(store, event_type)
            assert len(counts) == INSTANCES * (DEPTH + 2)  # the start, the chain, the end
            assert set(counts.values()) == {1}, counts.most_common(3)
        executions = Counter(marks.read_text().split("\n")[:-1])
        assert len(executions) == INSTANCES * DEPTH
        # Run again: only the nodes the victim's threads were running or committing when
        # it died, one a thread at most.
        again = sum(times - 1 for times in executions.values())
        assert set(executions.values()) <= {1, 2}, executions.most_common(3)
        assert again <= THREADS, f"{again} nodes ran twice; the victim held at most {THREADS}"
    finally:
        store.close()
