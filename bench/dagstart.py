"""What a DAG start costs the producer: ``python -m bench dagstart``.

One process starts instances one after the other on a fresh store, no runner: N
state-machine workflows with ``Client.start`` (an instance, its first event and its task:
the write a DAG start makes too), then N of each bench DAG shape (``bench/dag.py``: a
100-node chain, a 1 -> 100 -> 1 fan-out) with ``DagClient.start``, once given the
definition object and once by a saved name. Printed: wall and CPU ms a start, and the
DAG start over the state-machine start of the same run. Nothing here asserts a timing.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from typing import Any

from . import core, dag


def _timed(n: int, start: Callable[[int], Any]) -> tuple[float, float]:
    """Wall and CPU ms a call of ``start``, over ``n`` calls after 20 to warm up."""
    for i in range(20):
        start(i)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        start(i)
    return 1e3 * (time.perf_counter() - t0) / n, 1e3 * (time.process_time() - c0) / n


def run(store_kind: str, n: int, dsn: str = "") -> str:
    from statemachine_wf.client.machine import Client
    from statemachine_wf.dag import DagClient

    from .workload import ThreeSteps

    s = core.Settings(n=n, tmp=tempfile.mkdtemp(prefix="swfbench-dagstart-"))
    if dsn:
        s.dsn = dsn
    spec = core._spec(s, store_kind, "dagstart")
    core.fresh_store(spec)
    store = core.open_store(spec)
    store.migrate()
    # As once a runner hosting it has started: no warning, nothing to wait for.
    store.register_types(["swf.dag"], by="bench", kind="dag")
    logging.getLogger("statemachine_wf.client.dag").setLevel(logging.ERROR)
    try:
        client, dags = Client(store), DagClient(store)
        rows = [
            ("state machine, Client.start", _timed(n, lambda i: client.start(ThreeSteps, {"n": i})))
        ]
        for shape in dag.SHAPES:
            graph = dag.definition(shape)
            dags.save(graph)
            by_object = _timed(n, lambda i, g=graph: dags.start(g))
            by_name = _timed(n, lambda i, name=graph.name: dags.start(name))
            rows += [
                (f"dag {shape}, definition object", by_object),
                (f"dag {shape}, saved name", by_name),
            ]
    finally:
        store.close()
        core.drop_store(spec)
    base = rows[0][1][0]
    lines = [
        f"{store_kind}: {n} starts each, one after the other, one process, no runner",
        f"{'start':40} {'wall ms':>8} {'cpu ms':>8} {'vs machine':>11}",
    ]
    lines += [
        f"{name:40} {wall:8.2f} {cpu:8.2f} {wall / base:10.2f}x" for name, (wall, cpu) in rows
    ]
    return "\n".join(lines)
