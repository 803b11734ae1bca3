"""Work that arrives in waves at an idle runner: ``python -m bench wave``.

An idle runner (8 threads on PostgreSQL, 4 on SQLite) in another process; the parent
starts ``--size`` three-step workflows at once (``start_many``), waits until each one's
last step has run and the runner is idle again, and starts the next wave: timers that
fall due together, a batch a producer sends, a queue that refills. Each wave's latency is
from before ``start_many`` to the first step's action of its last workflow: how long the
wave waits for the runner's workers to take it up.

Printed: that latency (p50, p90, max over ``--waves`` waves), the runner's and its
backends' CPU a workflow, and how many claim statements a workflow cost (the runner's
own claims, counted in its process, with ``--count``: those on their own, the empty ones
among them, and the finishes whose claim took work).
Nothing here asserts a timing.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time
from typing import Any

from . import core


def wave_child(spec: dict[str, Any], barrier: Any, stop: Any) -> dict[str, Any]:
    from statemachine_wf.runtime.runner import Runner, RunnerOptions

    from . import workload
    from .statements import _Counted

    workload.REPORT = spec["report"]
    spec = dict(spec, app=f"swfbench-{os.getpid()}")
    store = core.open_store(spec)
    store.migrate()
    runner = Runner(
        store, [workload.ThreeSteps], options=RunnerOptions(concurrency=spec["concurrency"])
    )
    core.warm_pool(store, spec["concurrency"] + 2)
    counted = _Counted(store) if spec["count"] else None
    runner.start()
    time.sleep(0.5)  # every worker is idle, waiting for work
    barrier.wait(timeout=180)
    return core.measured(spec, runner, store, stop, counted, start=False)


def _entry(spec: dict[str, Any], barrier: Any, stop: Any, results: Any, report: Any) -> None:
    core._child(wave_child, dict(spec, report=report), barrier, stop, results)


def _wave(client: Any, report: Any, size: int, first: int) -> float:
    """One wave of ``size`` workflows; ms from the start to its last first step."""
    from .workload import ThreeSteps

    t0 = time.perf_counter()
    ids = set(client.start_many(ThreeSteps, [{"n": first + i} for i in range(size)]))
    firsts: list[float] = []
    lasts = 0
    while lasts < size:
        got, what, at = report.get(timeout=30)
        if got not in ids:
            raise RuntimeError(f"a report for {got}, not of this wave")
        if what == "first":
            firsts.append(at)
        else:
            lasts += 1
    return (max(firsts) - t0) * 1000


def run(store: str, waves: int, size: int, count: bool, dsn: str = "") -> str:
    from statemachine_wf.client.machine import Client

    s = core.Settings()
    if dsn:
        s.dsn = dsn
    s.tmp = tempfile.mkdtemp(prefix="swfbench-wave-")
    spec = core._spec(s, store, f"{store}_wave")
    spec["concurrency"] = s.pg_concurrency if store == "pg" else s.sqlite_concurrency
    spec["count"] = count
    core.fresh_store(spec)
    ctx = mp.get_context("spawn")
    barrier, stop, results, report = ctx.Barrier(2), ctx.Event(), ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_entry, args=(spec, barrier, stop, results, report), daemon=True)
    proc.start()
    client_store = core.open_store(spec)
    try:
        client = Client(client_store)
        core.warm_pool(client_store, 1)
        _wave(client, report, size, 0)  # warm-up: every statement prepared
        time.sleep(0.05)
        barrier.wait(timeout=180)
        took = []
        for w in range(waves):
            took.append(_wave(client, report, size, (w + 1) * size))
            time.sleep(0.05)  # every worker back to waiting
        out = core.child_result(stop, results)
    finally:
        core.stop_child(stop, proc, client_store, spec)
    n = waves * size
    took.sort()
    lines = [
        f"wave {store}: {waves} waves of {size} three-step workflows at an idle runner "
        f"({spec['concurrency']} threads, another process), cpus={os.cpu_count()}",
        f"  start -> last first step of a wave: p50 {core._pct(took, 50):.2f} ms, "
        f"p90 {core._pct(took, 90):.2f} ms, max {took[-1]:.2f} ms",
        f"  runner CPU {1000 * out['cpu'] / n:.2f} ms a workflow"
        + (f", its backends {1000 * out['pg_cpu'] / n:.2f} ms" if store == "pg" else ""),
    ]
    counts = out.get("counts", {})
    if count:
        got, empty = (counts.get(f"claim, {what}", [0])[0] / n for what in ("got work", "empty"))
        fused = counts.get("claim in a finish, got work", [0])[0] / n
        lines.append(
            f"  claims a workflow: {got + empty:.2f} on their own ({empty:.2f} of them empty), "
            f"{fused:.2f} in a finish that took work"
        )
    return "\n".join(lines)
