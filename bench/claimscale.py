"""How a claim's cost grows with the due backlog: ``python -m bench claimscale``.

For each backlog size B (default 100, 10,000, 100,000) and each store, a fresh store gets
B pending three-step instances (``Client.start_many``, all due now), then one connection
claims ``--claims`` tasks one at a time (``Store.claim``, as an idle runner does) and an
idle runner's ``next_due`` is timed too, and the heartbeat that extends those claims. A
claim that walks an index in its own order and stops at its limit costs the same at every
B; one that sorts the due tasks grows with B.
Nothing here asserts a timing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from .core import drop_store, fresh_store, open_store, pg_dsn


@dataclass
class Row:
    store: str
    backlog: int
    claims_per_s: float
    next_due_ms: float
    heartbeat_ms: float


def _fill(store: Any, n: int) -> None:
    from statemachine_wf import Client

    from .workload import BenchInput, ThreeSteps

    client = Client(store, [ThreeSteps])
    for k in range(0, n, 2000):
        client.start_many(ThreeSteps, [BenchInput(n=i) for i in range(k, min(n, k + 2000))])


def one(store_kind: str, backlog: int, claims: int, tmp: str) -> Row:
    from .workload import ThreeSteps

    if store_kind == "pg":
        spec: dict[str, Any] = {"store": "pg", "dsn": pg_dsn(), "schema": f"swfcs_{os.getpid()}"}
    else:
        spec = {"store": "sqlite", "path": os.path.join(tmp, f"cs-{backlog}.db")}
    fresh_store(spec)
    store = open_store(spec)
    try:
        _fill(store, backlog)
        types = [ThreeSteps.workflow_type]
        store.claim(worker="w", types=types, lease=600)  # warm: prepared, cached
        t0 = time.perf_counter()
        got = 0
        for _ in range(claims):
            got += len(store.claim(worker="w", types=types, lease=600))
        per_s = got / (time.perf_counter() - t0)
        t1 = time.perf_counter()
        for _ in range(200):
            store.next_due(types=types, dag_types=["bench.none.dag"])
        due_ms = (time.perf_counter() - t1) / 200 * 1000
        # The runner's heartbeat that logs (the default): its own leases, the claims above.
        t2 = time.perf_counter()
        for _ in range(50):
            store.heartbeat(worker="w", lease=600, log_every=60.0)
        beat_ms = (time.perf_counter() - t2) / 50 * 1000
    finally:
        store.close()
        drop_store(spec)
    return Row(store_kind, backlog, per_s, due_ms, beat_ms)


def run(stores: list[str], backlogs: list[int], claims: int) -> list[Row]:
    tmp = tempfile.mkdtemp(prefix="swfbench-cs-")
    try:
        return [one(s, b, claims, tmp) for s in stores for b in backlogs]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def table(rows: list[Row]) -> str:
    head = ("store", "due backlog", "claims/s", "vs smallest", "next_due ms", "heartbeat ms")
    lines = [f"{head[0]:<7} {head[1]:>11} {head[2]:>9} {head[3]:>11} {head[4]:>11} {head[5]:>12}"]
    base: dict[str, float] = {}
    for r in rows:
        base.setdefault(r.store, r.claims_per_s)
        lines.append(
            f"{r.store:<7} {r.backlog:>11,} {r.claims_per_s:>9.0f}"
            f" {r.claims_per_s / base[r.store]:>11.2f} {r.next_due_ms:>11.3f}"
            f" {r.heartbeat_ms:>12.3f}"
        )
    lines.append("one connection, one task per claim (Store.claim), lease 600 s; next_due as an")
    lines.append("idle runner with state-machine and DAG types asks it (next_due_kinds);")
    lines.append("heartbeat: the claiming worker's leases extended, as a runner's logging one")
    return "\n".join(lines)
