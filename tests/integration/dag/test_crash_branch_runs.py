"""A DAG runner whose workers run a fan-out's branches in runs (runtime/dag_batch.py: a
commit takes several due branches for one worker, which runs them and commits their
completions together), SIGKILLed in the middle: nothing lost, no node completed or
dispatched twice, and no node run more than once again.

A branch of a run that ran but whose completion was not yet committed is run again by
the heir once the victim's lease runs out, as after any crash between a node's run and
its commit; a branch taken and not run yet is run once, by the heir. So at most a run's
worth of branches a thread runs twice.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest

from statemachine_wf import Status, open_store
from statemachine_wf.core.store import Store
from statemachine_wf.dag import DagClient
from statemachine_wf.runtime.dag_batch import RUN

from . import helpers as h
from .test_concurrency import _wait_all, marked_fan_out

INSTANCES, WIDTH, THREADS = 16, 30, 8


def _rows(store: Store, sql: str, *params: object) -> list[Any]:
    """The raw rows of ``sql`` (``?`` placeholders) on either store."""
    if store.dialect == "postgres":
        sql = sql.replace("?", "%s")
    with cast(Any, store)._conn() as conn:
        return list(conn.execute(sql, params).fetchall())


def _runs_by(store: Store, pid: int) -> int:
    """Commits of ``pid``'s runner that completed one node and took several: a run (a
    commit's events share its transaction's time)."""
    [row] = _rows(
        store,
        "SELECT count(*) AS n FROM (SELECT instance_id, created_at FROM wf_events"
        " WHERE worker LIKE ? GROUP BY instance_id, created_at"
        " HAVING count(*) FILTER (WHERE event_type = 'NODE_COMPLETED') = 1"
        " AND count(*) FILTER (WHERE event_type = 'NODE_STARTED') >= 2) AS r",
        f"%:{pid}:%",
    )
    return int(row["n"])


def _per_node(store: Store, event_type: str) -> Counter[tuple[str, str]]:
    rows = _rows(
        store,
        "SELECT CAST(instance_id AS TEXT) AS i, node, count(*) AS n FROM wf_events"
        " WHERE event_type = ? GROUP BY instance_id, node",
        event_type,
    )
    return Counter({(r["i"], r["node"]): int(r["n"]) for r in rows})


@pytest.mark.slow
@pytest.mark.crash
def test_a_runner_killed_with_runs_of_branches_in_flight_loses_nothing(
    store_url: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, options = store_url
    schema = options.get("schema", "-")
    store = open_store(url, **options)
    store.migrate()
    marks = tmp_path / "marks.txt"
    nodes = WIDTH + 1  # the branches and the join mark; the start and the end don't
    try:
        client = DagClient(store)
        definition = marked_fan_out(WIDTH)
        ids = [client.start(definition, {"run": f"k{i}"}) for i in range(INSTANCES)]
        with h.runner_processes(url, schema, marks, count=1, concurrency=THREADS, lease=2.0) as [
            victim
        ]:
            # Killed once a third of the node runs are done: its threads are then running
            # branches, several taken at a time, and committing them.
            h.kill_when_marked(victim, marks, INSTANCES * nodes // 3)
        assert h.marked(marks) < INSTANCES * nodes, "the victim finished before its kill"
        assert _runs_by(store, victim.pid) > 0, "the victim never took a run of branches"

        with h.runner_processes(url, schema, marks, count=1, concurrency=THREADS):
            _wait_all(client, ids, timeout=120)

        assert {client.get(i).status for i in ids} == {Status.COMPLETED}
        assert all(client.output(i) == {"joined": "join"} for i in ids)
        for event_type in ("NODE_DISPATCHED", "NODE_COMPLETED"):
            counts = _per_node(store, event_type)
            assert len(counts) == INSTANCES * (nodes + 2)  # with the start and the end
            assert set(counts.values()) == {1}, counts.most_common(3)
        executions = Counter(marks.read_text().split("\n")[:-1])
        assert len(executions) == INSTANCES * nodes
        # Run again: only what the victim's threads had run and not committed when it
        # died, a run's worth a thread at most.
        again = sum(times - 1 for times in executions.values())
        assert set(executions.values()) <= {1, 2}, executions.most_common(3)
        assert again <= THREADS * RUN, f"{again} nodes ran twice; at most {THREADS * RUN}"
    finally:
        store.close()
