"""Timer lateness: ``python -m bench signals [--n 200] [--spacing 0.02] [--only pg,sqlite]``.

An idle runner (another process, 8 threads on PostgreSQL, 4 on SQLite, default
``idle_poll``) hosts a one-step workflow that calls ``ctx.sleep_until(at)``. The parent
starts N instances with ``at`` spaced ``spacing`` seconds apart, far enough ahead that
all of them have parked first, so one timer falls due at a time on an idle runner; the
step, run again after the timer, puts ``time.time() - at`` on a queue. Lateness = that
difference: timer row due -> runner woken (next due time) -> the claim, which fires the
timer (TIMER_FIRED + STEP_STARTED in its commit) -> step re-run. Nothing here asserts a
timing.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from statemachine_wf.definition.workflow import COMPLETED, Workflow, step
from statemachine_wf.runtime.context import StepContext

from .core import (
    _child,
    _pct,
    _spec,
    child_result,
    fresh_store,
    open_store,
    pg_dsn,
    stop_child,
    warm_pool,
)

REPORT: Any = None  # set in the runner child: (instance_id, lateness in s)


class NapInput(BaseModel):
    at: float


class NapProgress(BaseModel):
    pass


class Nap(Workflow[NapInput, NapProgress]):
    workflow_type = "bench.nap.v1"

    @step(initial=True, to=COMPLETED)
    def nap(self, ctx: StepContext[NapInput, NapProgress]) -> None:
        ctx.sleep_until(datetime.fromtimestamp(ctx.input.at, UTC))
        if REPORT is not None:
            REPORT.put((ctx.instance_id, time.time() - ctx.input.at))


@dataclass
class Settings:
    n: int = 200
    spacing: float = 0.02
    pg_concurrency: int = 8
    sqlite_concurrency: int = 4
    dsn: str = field(default_factory=pg_dsn)
    tmp: str = ""


def runner_child(spec: dict[str, Any], barrier: Any, stop: Any) -> dict[str, Any]:
    global REPORT
    from statemachine_wf.runtime.runner import Runner, RunnerOptions

    REPORT = spec["report"]
    store = open_store(spec)
    store.migrate()
    runner = Runner(store, [Nap], options=RunnerOptions(concurrency=spec["concurrency"]))
    warm_pool(store, spec["concurrency"] + 2)
    runner.start()
    time.sleep(0.5)  # every worker idle
    barrier.wait(timeout=180)
    stop.wait()
    runner.stop(timeout=30)
    store.close()
    return {}


def _entry(spec: dict[str, Any], barrier: Any, stop: Any, results: Any, report: Any) -> None:
    _child(runner_child, dict(spec, report=report), barrier, stop, results)


def run_store(s: Settings, store: str) -> dict[str, Any]:
    from statemachine_wf.client.machine import Client

    from .core import Settings as CoreSettings

    spec = _spec(CoreSettings(dsn=s.dsn, tmp=s.tmp), store, f"{store}_timers")
    spec["concurrency"] = s.pg_concurrency if store == "pg" else s.sqlite_concurrency
    fresh_store(spec)
    ctx = mp.get_context("spawn")
    barrier, stop, results, report = ctx.Barrier(2), ctx.Event(), ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_entry, args=(spec, barrier, stop, results, report), daemon=True)
    proc.start()
    client_store = open_store(spec)
    try:
        client = Client(client_store)
        barrier.wait(timeout=180)
        # Far enough ahead that every instance has parked (run up to its sleep) before
        # the first timer is due: the runner is idle when the timers fire.
        lead = 2.0 + s.n * 0.02
        t0 = time.time()
        base = t0 + lead
        ids = {client.start(Nap, {"at": base + i * s.spacing}) for i in range(s.n)}
        created = time.time() - t0
        while client_store.signal_counts()["pending"] < s.n and time.time() < base:
            time.sleep(0.05)
        parked = client_store.signal_counts()["pending"] >= s.n and time.time() < base
        late: list[float] = []
        while len(late) < s.n:
            iid, lateness = report.get(timeout=60)
            if iid in ids:
                late.append(lateness * 1000)
        child_result(stop, results)
    finally:
        stop_child(stop, proc, client_store, spec)
    return {
        "store": store,
        "n": s.n,
        "p50_ms": _pct(late, 50),
        "p90_ms": _pct(late, 90),
        "p99_ms": _pct(late, 99),
        "max_ms": max(late),
        "min_ms": min(late),
        "create_s": created,
        "idle_at_first_due": parked,
        "concurrency": spec["concurrency"],
    }


def main(s: Settings, only: list[str] | None) -> int:
    own = not s.tmp
    if own:
        s.tmp = tempfile.mkdtemp(prefix="swfbench-signals-")
    rows = []
    for store in only or ["pg", "sqlite"]:
        load = os.getloadavg()[0]  # the machine's, before this store's run
        rows.append({**run_store(s, store), "load": load})
    print(f"timer lateness, idle runner in another process; N={s.n}, spacing {s.spacing} s")
    for r in rows:
        # issue 12's goal: p99 <= 5 ms at a load average of 2 or less; above that load the
        # run says nothing about the goal either way
        if r["load"] > 2.0:
            met = "not judged, load above 2"
        else:
            met = "met" if r["p99_ms"] <= 5.0 else "NOT met"
        print(
            f"  {r['store']:<6} ({r['concurrency']} threads): p50 {r['p50_ms']:.2f} ms, "
            f"p90 {r['p90_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, max {r['max_ms']:.2f} ms, "
            f"min {r['min_ms']:.2f} ms  (load {r['load']:.2f}; goal p99 <= 5 ms: {met}; "
            f"{s.n} starts took {r['create_s']:.2f} s; all parked before the first due "
            f"time: {r['idle_at_first_due']})"
        )
    if own:
        import shutil

        shutil.rmtree(s.tmp, ignore_errors=True)
    return 0
