"""Profile one single-process runner run in this process (every worker thread).

cProfile only sees the thread that enabled it, so the runner's ``_work`` loop is
wrapped: each worker thread profiles itself and the stats are merged at the end.
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing
import os
import pstats
import shutil
import tempfile
import threading
import time
from typing import Any

from . import core


def main(args: argparse.Namespace) -> int:
    from statemachine_wf.runtime.runner import Runner, RunnerOptions

    from . import dag, workload
    from .workload import ThreeSteps

    s = core.Settings(n=args.n)
    if args.dsn:
        s.dsn = args.dsn
    s.tmp = tempfile.mkdtemp(prefix="swfbench-prof-")
    spec = core._spec(s, args.store, f"{args.store}_profile")
    conc = args.concurrency or (s.pg_concurrency if args.store == "pg" else s.sqlite_concurrency)
    spec["concurrency"] = conc
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()
    ended = workload.ENDED = multiprocessing.Value("q", 0)

    class ProfiledRunner(Runner):
        def _work(self) -> None:
            if args.no_profile:
                super()._work()
                return
            # --cpu: each thread's own CPU clock, so time spent waiting (locks, fsync)
            # drops out and what is left is what the step costs the process's core.
            prof = cProfile.Profile(time.thread_time) if args.cpu else cProfile.Profile()
            prof.enable()
            try:
                super()._work()
            finally:
                prof.disable()
                with lock:
                    profiles.append(prof)

    try:
        core.fresh_store(spec)
        if args.dag:
            dag.precreate(spec, args.dag, s.n)
            units, unit = s.n * dag.node_count(args.dag), "node"
        else:
            core.precreate(spec, s.n)
            units, unit = s.n * core.STEPS, "step"
        store: Any = core.open_store(spec)
        store.migrate()
        core.warm_pool(store, conc + 2, dags=bool(args.dag))
        runner = ProfiledRunner(
            store,
            [] if args.dag else [ThreeSteps],
            dags=dag.registry if args.dag else None,
            options=RunnerOptions(concurrency=conc),
        )
        with core.watcher(spec) as count:
            t0 = time.perf_counter()
            c0, t0s = time.process_time(), os.times()
            pg0, (b0, a0) = core.proc_cpu("postgres"), core.machine_busy()
            runner.start()
            # The database is read once the workflows' last steps have all run (not every
            # few milliseconds all the run long: core.run_group's ends_counted).
            while (not args.dag and ended.value < s.n) or count()[0] < s.n:
                time.sleep(0.002)
            elapsed = time.perf_counter() - t0
            cpu, t1s = time.process_time() - c0, os.times()
            pg_cpu, (b1, a1) = core.proc_cpu("postgres") - pg0, core.machine_busy()
        runner.stop(timeout=30)
        store.close()
    finally:
        core.drop_store(spec)
        shutil.rmtree(s.tmp, ignore_errors=True)
    rate = units / elapsed
    what = f"{args.dag} DAG instances" if args.dag else "workflows"
    print(
        f"{args.store} 1 process, concurrency {conc}: {s.n} {what} in {elapsed:.2f} s = "
        f"{rate:.0f} {unit}s/s ({'profiled' if profiles else 'not profiled'}; pid {os.getpid()})"
    )
    print(
        f"process CPU {cpu:.2f} s = {1000 * cpu / units:.3f} ms per {unit} "
        f"({100 * cpu / elapsed:.0f}% of one core; user "
        f"{1000 * (t1s.user - t0s.user) / units:.3f}, system "
        f"{1000 * (t1s.system - t0s.system) / units:.3f})"
    )
    print(
        f"postgres server CPU {pg_cpu:.2f} s = {1000 * pg_cpu / units:.3f} ms per {unit}; "
        f"machine busy {100 * (b1 - b0) / max(1, a1 - a0):.0f}% of {os.cpu_count()} cpus "
        f"during the run (other tenants included)"
    )
    if profiles:
        stats = pstats.Stats(profiles[0])
        for prof in profiles[1:]:
            stats.add(prof)
        stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
    return 0
