"""``python -m bench writers``: processes writing one SQLite file, queued on the store's file
lock (``stores/_filelock.py``) or, as before it, on SQLite's busy handler alone.

Each of ``--procs`` processes runs ``--threads`` threads, and each thread makes ``--n``
instances one ``create`` at a time (one write transaction each, grouped by the process's
group commit), sleeping ``--think`` seconds between them as a runner does its other work.
The two ways alternate round by round on fresh files, in one run, so the ratio compares
like with like on a noisy machine. Per round: creates/s over the wall time, CPU per create
(all processes), and each create's latency: p50, p99.9, the worst, and how many took over
100 ms.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from statemachine_wf.core.store import NewInstance
from statemachine_wf.stores.sqlite import SQLiteStore


@dataclass
class Settings:
    procs: int = 4
    threads: int = 4
    n: int = 250
    think: float = 0.002
    rounds: int = 3


def _worker(path: str, queued: bool, s: Settings, out: Any) -> None:
    store = SQLiteStore(path)
    if not queued:
        store._writers._off = True  # the busy handler alone, as before the file lock
    latencies: list[float] = []

    def run() -> None:
        for i in range(s.n):
            t0 = time.perf_counter()
            new = NewInstance(id=str(uuid.uuid4()), type="bench.v1", input={"i": i}, initial="a")
            store.create(new)
            latencies.append(time.perf_counter() - t0)
            time.sleep(s.think)

    store.registered_types()  # the file opened before the clock starts
    c0, w0 = time.process_time(), time.time()
    threads = [threading.Thread(target=run) for _ in range(s.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((time.process_time() - c0, latencies, w0, time.time()))
    store.close()


def one_round(queued: bool, s: Settings) -> dict[str, float]:
    folder = tempfile.mkdtemp(prefix="swfbench-writers-")
    path = os.path.join(folder, "w.db")
    SQLiteStore(path).migrate()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(path, queued, s, out)) for _ in range(s.procs)]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    shutil.rmtree(folder, ignore_errors=True)  # each round's file is fresh and thrown away
    # From the first process's first create to the last one's end (spawn's start-up is not
    # the writers' business; one clock, one machine).
    wall = max(r[3] for r in results) - min(r[2] for r in results)
    total = s.procs * s.threads * s.n
    lat = sorted(x for r in results for x in r[1])
    return {
        "rate": total / wall,
        "cpu_ms": 1000 * sum(r[0] for r in results) / total,
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p999_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.999))],
        "max_ms": 1000 * lat[-1],
        "over_100ms": float(sum(x > 0.1 for x in lat)),
    }


def main(s: Settings) -> int:
    print(
        f"{s.procs} processes x {s.threads} threads x {s.n} creates on one SQLite file "
        f"(synchronous=FULL), {1000 * s.think:.0f} ms between a thread's creates; "
        f"cpus={os.cpu_count()}"
    )
    header = (
        f"{'round':<6}{'queued on':<16}{'creates/s':>10}{'cpu ms':>8}"
        f"{'p50 ms':>8}{'p99.9 ms':>10}{'max ms':>8}{'>100 ms':>8}"
    )
    print(header)
    print("-" * len(header))
    ratios, tails = [], []
    for r in range(1, s.rounds + 1):
        rows = {}
        for queued in (False, True):
            row = rows[queued] = one_round(queued, s)
            print(
                f"{r:<6}{'the file lock' if queued else 'busy handler':<16}"
                f"{row['rate']:>10.0f}{row['cpu_ms']:>8.2f}{row['p50_ms']:>8.1f}"
                f"{row['p999_ms']:>10.1f}{row['max_ms']:>8.0f}{row['over_100ms']:>8.0f}"
            )
        ratios.append(rows[True]["rate"] / rows[False]["rate"])
        tails.append(rows[True]["p999_ms"] / rows[False]["p999_ms"])
    print(
        f"file lock over busy handler, median of {s.rounds} rounds: "
        f"creates/s {statistics.median(ratios):.2f}x, p99.9 latency {statistics.median(tails):.2f}x"
    )
    return 0
