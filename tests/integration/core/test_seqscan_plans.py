"""The runtime's statements reach rows by key even when their plans were made on a small
table, and the operator's counts still scan (docs/architecture.md, "Plans made on a
small table").

A plan is made once per connection and kept until the table's statistics change. Made on
a fresh schema, the continue, the finish and the claim were sequential scans of
``wf_tasks`` and ``wf_instances``, the cheapest plans for a few pages, and they read the
whole of both tables on every call once these had grown, until autovacuum's next ANALYZE.
The store's connections price sequential scans out; the queries marked ``-- plan: scans``
(the dashboard's counts, listings, retention) run with them allowed. The table counters
of ``pg_stat_user_tables`` and ``pg_stat_user_indexes`` say which plan ran (rows scanned,
index entries read): a backend reports them when it exits."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from pydantic import BaseModel

from statemachine_wf import COMPLETED, Client, Runner, RunnerOptions, StepContext, Workflow, step
from statemachine_wf.stores._pgconn import SCANS
from statemachine_wf.stores._sql import queries
from statemachine_wf.stores.postgres import PostgresStore

GROWN = 5_000  # instances and tasks added once the plans are made
RUNS = 20  # workflows a phase


class In(BaseModel):
    n: int = 0


class Three(Workflow[In, BaseModel]):
    workflow_type = "t.seqscan.three.v1"

    @step(initial=True, to="b")
    def a(self, ctx: StepContext[In, BaseModel]) -> str:
        return "b"

    @step(to="c")
    def b(self, ctx: StepContext[In, BaseModel]) -> str:
        return "c"

    @step(to=COMPLETED)
    def c(self, ctx: StepContext[In, BaseModel]) -> None:
        return None


def _counters(
    admin: psycopg.Connection[tuple[Any, ...]], schema: str
) -> dict[str, tuple[int, ...]]:
    """Per table: sequential scans, rows they read, rows deleted, and the entries that
    index scans read, summed over the table's indexes."""
    rows = admin.execute(
        "SELECT t.relname, t.seq_scan, t.seq_tup_read, t.n_tup_del,"
        " (SELECT sum(i.idx_tup_read) FROM pg_stat_user_indexes i WHERE i.relid = t.relid)"
        " FROM pg_stat_user_tables t"
        " WHERE t.schemaname = %s AND t.relname IN ('wf_tasks', 'wf_instances')",
        (schema,),
    ).fetchall()
    return {str(r[0]): tuple(int(v or 0) for v in r[1:]) for r in rows}


def _reported(
    admin: psycopg.Connection[tuple[Any, ...]],
    schema: str,
    done: Callable[[dict[str, tuple[int, ...]]], bool],
) -> dict[str, tuple[int, ...]]:
    """The counters once ``done`` says the closed store's backends have reported."""
    deadline = time.monotonic() + 20
    while True:
        counts = _counters(admin, schema)
        if done(counts) or time.monotonic() > deadline:
            return counts
        time.sleep(0.2)


def _run(store: PostgresStore, first: int) -> None:
    client = Client(store, [Three])
    for n in range(first, first + RUNS):
        client.start(Three, In(n=n))
    Runner(
        store,
        [Three],
        options=RunnerOptions(concurrency=1, idle_poll=0.2, reconcile_on_start=False),
    ).run_until_idle(timeout=60)


def _grow(admin: psycopg.Connection[tuple[Any, ...]], schema: str) -> None:
    """GROWN instances of another type, each with a task parked an hour ahead, in one
    statement that reads neither table, so the counters are the store's alone.

    Without its foreign-key check: each task's lookup of its instance reads an entry of
    ``wf_instances``' key, GROWN in all, which this connection reports once a second has
    passed since its last report (a slow run's polls in ``_reported``: 5,742 read)."""
    with admin.transaction():
        admin.execute("SET LOCAL session_replication_role = replica")
        admin.execute(
            sql.SQL(
                "WITH ins AS ("
                " INSERT INTO {}.wf_instances (id, type, kind, status, step, input)"
                " SELECT gen_random_uuid(), 't.seqscan.other.v1', 'machine', 'PENDING', 'go',"
                " '{{}}' FROM generate_series(1, %s) RETURNING id, type)"
                " INSERT INTO {}.wf_tasks (instance_id, slot, node, kind, type, priority, due_at)"
                " SELECT id, '', 'go', 'machine', type, 100, now() + interval '1 hour' FROM ins"
            ).format(sql.Identifier(schema), sql.Identifier(schema)),
            (GROWN,),
        )


def test_plans_made_on_a_small_table_read_the_grown_one_by_key(pg_dsn: str, pg_schema: str) -> None:
    # One connection, so the plans the first runs make are the ones the second runs use.
    store = PostgresStore(pg_dsn, schema=pg_schema, pool_size=1)
    store.migrate()
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        # The window this is about: before autovacuum's next ANALYZE, which would make
        # every plan again (and did, in some runs, between the two phases).
        for table in ("wf_tasks", "wf_instances"):
            admin.execute(
                sql.SQL("ALTER TABLE {}.{} SET (autovacuum_enabled = false)").format(
                    sql.Identifier(pg_schema), sql.Identifier(table)
                )
            )
        try:
            _run(store, 0)  # fresh tables: each statement's plan is made here, and kept
            _grow(admin, pg_schema)
            _run(store, RUNS)  # the same connections, the same plans, the grown tables
        finally:
            store.close()  # its backends exit and report their counters
        # Every finish deleted a task: 2 * RUNS deletions once all have reported.
        counts = _reported(admin, pg_schema, lambda c: c.get("wf_tasks", (0, 0, 0))[2] >= 2 * RUNS)
    assert counts["wf_tasks"][2] >= 2 * RUNS, counts
    # A scan of a grown table reads GROWN rows; by key, the runs read a handful. Not only
    # sequentially: with sequential scans priced out, the task update of a continue and the
    # delete of a finish (`... FROM inst WHERE t.instance_id = inst.id`) were planned on
    # the small table as a walk of the whole (instance_id, slot) index, outer to the one
    # row of `inst`, and read 301,376 entries here (docs/architecture.md, "Plans made on a
    # small table").
    for table in ("wf_tasks", "wf_instances"):
        assert counts[table][1] < GROWN, (table, counts)
        assert counts[table][3] < GROWN, (table, "index entries read", counts)


def test_the_operators_counts_still_scan(pg_dsn: str, pg_schema: str) -> None:
    store = PostgresStore(pg_dsn, schema=pg_schema)
    store.migrate()
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        _grow(admin, pg_schema)
        before = _counters(admin, pg_schema)["wf_instances"]
        try:
            assert store.status_counts() == {"PENDING": GROWN}
        finally:
            store.close()
        counts = _reported(admin, pg_schema, lambda c: c["wf_instances"][0] > before[0])[
            "wf_instances"
        ]
    # One sequential scan of the whole table (by an index with scans off, 4.4x the time
    # at 300,000 instances: bench/README.md, "Plans made on a small table").
    assert counts[0] > before[0], (before, counts)
    assert counts[1] - before[1] >= GROWN, (before, counts)


def test_the_queries_marked_to_scan_are_the_operators() -> None:
    names = set(queries("postgres"))
    assert names >= SCANS
    assert {"status_counts", "queue_depth", "page_instances", "purge_batch"} <= SCANS
    # The runtime's own statements are never marked.
    assert not SCANS & {"claim", "apply_head", "apply_continue", "apply_finish", "dag_claim"}
