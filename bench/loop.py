"""What a DAG loop's iteration costs as the loop grows: ``python -m bench loop``.

One instance of ``start -> each (loop over N items) -> body -> back to each``, ``each
--done--> end``, run to its end by one runner of one worker in this process, for each N
given. Printed: wall and CPU ms an iteration (two node commits: the loop node's and the
body's) for each N, and each N's CPU an iteration over the smallest N's: 1.00 is a loop
whose iterations cost the same however many came before them. Nothing here asserts a
timing.
"""

from __future__ import annotations

import logging
import tempfile
import time
from typing import Any

from . import core


def definition() -> Any:
    from statemachine_wf.dag import DagBuilder

    b = DagBuilder("bench-loop")
    b.node("start", "start")
    b.node("each", "loop", items="{{ctx.input.items}}")
    b.node("body", "python", function="bench_loop_body", args={"i": "{{ctx.each.index}}"})
    b.node("end", "end", outputs={"n": "{{ctx.each.count}}"})
    b.edge("start", "each")
    b.edge("each", "body", handle="loop")
    b.edge("body", "each")
    b.edge("each", "end", handle="done")
    return b.build()


def one(store_kind: str, iterations: int, dsn: str) -> tuple[float, float]:
    """Wall and CPU ms an iteration of one loop of ``iterations``, on a fresh store."""
    from statemachine_wf import Runner, RunnerOptions
    from statemachine_wf.dag import DagClient, Registry

    registry = Registry()
    registry.function("bench_loop_body")(lambda i: i)
    s = core.Settings(tmp=tempfile.mkdtemp(prefix="swfbench-loop-"))
    if dsn:
        s.dsn = dsn
    spec = core._spec(s, store_kind, f"loop{iterations}")
    core.fresh_store(spec)
    store = core.open_store(spec)
    try:
        store.migrate()
        store.register_types(["swf.dag"], by="bench", kind="dag")
        client = DagClient(store)
        run = client.start(definition(), {"items": list(range(iterations))})
        runner = Runner(store, [], dags=registry, options=RunnerOptions(concurrency=1))
        settle = 0.2
        t0, c0 = time.perf_counter(), time.process_time()
        runner.run_until_idle(timeout=3600, settle=settle)
        wall, cpu = time.perf_counter() - t0 - settle, time.process_time() - c0
        done = client.get(run)
        if done is None or str(done.status) != "COMPLETED":
            raise RuntimeError(f"the loop of {iterations} did not complete: {done}")
    finally:
        store.close()
        core.drop_store(spec)
    return 1e3 * wall / iterations, 1e3 * cpu / iterations


def run(store_kind: str, sizes: list[int], dsn: str = "") -> str:
    logging.getLogger("statemachine_wf.client.dag").setLevel(logging.ERROR)
    rows = [(n, *one(store_kind, n, dsn)) for n in sizes]
    base = rows[0][2]
    lines = [
        f"{store_kind}: one loop instance, one runner of one worker, this process",
        f"{'iterations':>10} {'wall ms/it':>11} {'cpu ms/it':>10} {'cpu vs first':>13}",
    ]
    lines += [f"{n:>10} {wall:11.2f} {cpu:10.2f} {cpu / base:12.2f}x" for n, wall, cpu in rows]
    return "\n".join(lines)
