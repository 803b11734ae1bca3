"""A backlog that arrives after the runner's plans were made: ``python -m bench burst``.

PostgreSQL keeps a statement's plan for the life of its connection, until the table's
statistics change (autovacuum's next ANALYZE). A runner that starts on small tables (a
fresh deployment, a quiet night) plans its statements there, and a burst of work then
runs on those plans. This measures that case on a fresh schema, autovacuum on as the
server has it:

1. a runner (8 threads, the library's pool) runs ``--warm`` three-step workflows started
   one by one: each statement is planned while the tables hold a few hundred rows;
2. the runner stops; ``--backlog`` workflows are started at once (``start_many``, 2,000 a
   call), all due now;
3. a runner on the same store, so on the same pooled connections and their plans, runs
   until ``--sample`` of them have completed, timed.

Printed: steps/s of both phases, their ratio, the index entries of ``wf_tasks`` read a
step in the burst (``pg_stat_user_indexes``; a plan that walks a whole index reads about
the backlog each time) and whether autovacuum analysed ``wf_tasks`` meanwhile.
Nothing here asserts a timing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from .core import drop_store, fresh_store, open_store, pg_dsn, watcher


def _tasks_stats(admin: Any, schema: str) -> tuple[int, int]:
    """(index entries read on wf_tasks, its autoanalyze count): as reported so far."""
    admin.execute("SELECT pg_stat_clear_snapshot()")
    row = admin.execute(
        "SELECT (SELECT coalesce(sum(i.idx_tup_read), 0) FROM pg_stat_user_indexes i"
        "        WHERE i.relid = t.relid), t.autoanalyze_count"
        " FROM pg_stat_user_tables t WHERE t.schemaname = %s AND t.relname = 'wf_tasks'",
        (schema,),
    ).fetchone()
    return int(row[0]), int(row[1])


def _until(count: Callable[[], tuple[int, int]], n: int, timeout: float) -> float:
    """Seconds until ``n`` instances have completed (``count``: core.watcher's; polled
    every 20 ms)."""
    t0 = time.perf_counter()
    while count()[0] < n:
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"fewer than {n} completed after {timeout:.0f} s")
        time.sleep(0.02)
    return time.perf_counter() - t0


def run(backlog: int, warm: int, sample: int, dsn: str = "", timeout: float = 600) -> str:
    import psycopg

    from statemachine_wf import Client, Runner, RunnerOptions

    from .workload import BenchInput, ThreeSteps

    spec = {"store": "pg", "dsn": dsn or pg_dsn(), "schema": f"swfbench_burst_{os.getpid()}"}
    fresh_store(spec)
    store = open_store(spec)
    try:
        store.migrate()
        client = Client(store, [ThreeSteps])
        options = RunnerOptions(concurrency=8, reconcile_on_start=False)
        with psycopg.connect(spec["dsn"], autocommit=True) as admin, watcher(spec) as count:
            runner = Runner(store, [ThreeSteps], options=options)
            runner.start()
            t0 = time.perf_counter()
            for i in range(warm):
                client.start(ThreeSteps, BenchInput(n=i))
            warm_s = (time.perf_counter() - t0) + _until(count, warm, timeout)
            runner.stop(timeout=30)
            for k in range(0, backlog, 2000):
                inputs = [BenchInput(n=i) for i in range(k, min(backlog, k + 2000))]
                client.start_many(ThreeSteps, inputs)
            time.sleep(1.0)  # the backends' counters reported
            read0, analyzed0 = _tasks_stats(admin, spec["schema"])
            runner = Runner(store, [ThreeSteps], options=options)
            runner.start()
            burst_s = _until(count, warm + sample, timeout)
            runner.stop(timeout=30)
            time.sleep(1.0)
            read1, analyzed1 = _tasks_stats(admin, spec["schema"])
    finally:
        store.close()
        drop_store(spec)
    warm_rate, burst_rate = 3 * warm / warm_s, 3 * sample / burst_s
    per_step = (read1 - read0) / (3 * sample)
    analysed = "yes" if analyzed1 > analyzed0 else "no"
    return "\n".join(
        [
            f"burst pg: {warm} workflows planned the statements, then {backlog:,} started "
            f"at once; 8 threads, cpus={os.cpu_count()}",
            f"  before the burst   {warm_rate:8.0f} steps/s",
            f"  in the burst       {burst_rate:8.0f} steps/s  ({burst_rate / warm_rate:.2f} of "
            f"before; the first {sample:,} workflows, {burst_s:.2f} s)",
            f"  wf_tasks index entries read a step in the burst: {per_step:,.0f}; "
            f"autovacuum analysed wf_tasks meanwhile: {analysed}",
        ]
    )
