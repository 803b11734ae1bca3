"""The soak benchmark: N workflows of three no-op steps through ONE runner process.

Does the runner's memory and throughput stay flat over a long run? The runner lives in a
``spawn``-ed child, so its RSS is its own. The parent starts instances in batches
(``Client.start_many``), keeping at most ``backlog`` of them not yet finished, so the
queue stays bounded while the finished history (``wf_instances``, ``wf_events``) grows.
Every ``sample`` seconds the parent records the finished count, the child's RSS
(``/proc/<pid>/status`` VmRSS) and CPU (``/proc/<pid>/stat`` utime+stime) and, on
PostgreSQL, the CPU of the runner's own backends (found by ``application_name``).

Nothing here asserts a timing: the summary says whether RSS stayed within +-10% of its
value after warm-up, and gives throughput and CPU per step of the first and last quarter.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
import queue
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from typing import Any

from .core import STEPS, _child, _pid_cpu, drop_store, fresh_store, open_store, pg_dsn, warm_pool

TABLES = ("wf_instances", "wf_events", "wf_tasks")


@dataclass
class Settings:
    store: str = "sqlite"  # "sqlite" | "pg"
    n: int = 100_000
    batch: int = 500
    """Instances per ``Client.start_many`` call."""
    backlog: int = 5_000
    """At most this many started and not yet finished: the queue stays bounded."""
    concurrency: int = 0
    """Runner threads; 0: 8 on PostgreSQL, 4 on SQLite (as ``bench core``)."""
    sample: float = 2.0
    """Seconds between two samples (one row of the time series each)."""
    warmup: float = 0.10
    """RSS is judged from the first sample with this fraction of N finished."""
    dsn: str = field(default_factory=pg_dsn)
    timeout: float = 7200.0
    tmp: str = ""

    @classmethod
    def quick(cls) -> Settings:
        return cls(n=10_000)

    def threads(self) -> int:
        return self.concurrency or (8 if self.store == "pg" else 4)


@dataclass
class Sample:
    elapsed: float
    completed: int
    rss_kib: int
    cpu: float
    """The runner process's CPU seconds since the start."""
    server_cpu: float
    """Its postgres backends' CPU seconds since the start (0 on SQLite)."""
    threads: int


# -- /proc ------------------------------------------------------------------------------
def proc_status(pid: int) -> tuple[int, int]:
    """(VmRSS in KiB, threads) of a live process."""
    rss = threads = 0
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads


class Vacuum:
    """Stands in for autovacuum where the server has it off (as the shared server here):
    ``VACUUM (ANALYZE)`` of the hot tables every ``every`` seconds. Every step rewrites its
    task row (no HOT update: ``due_at`` is indexed), so without any vacuum ``wf_tasks``
    grows by a dead row a step and the claim reads through them (and without ANALYZE the
    planner keeps a plan for an empty table): the run would measure the missing
    autovacuum, not the library. Off when the server runs autovacuum itself."""

    TABLES = ("wf_tasks", "wf_instances", "wf_locks", "wf_signals")

    def __init__(self, dsn: str, schema: str, every: float) -> None:
        import psycopg

        self.conn = psycopg.connect(
            dsn, autocommit=True, application_name="swfbench-vacuum",
            options=f"-c search_path={schema}",
        )  # fmt: skip
        row = self.conn.execute("SHOW autovacuum").fetchone()
        self.active = row is not None and row[0] == "off"
        self.every = every
        self.runs = 0
        self.next = time.perf_counter() + every

    def maybe(self) -> None:
        if not self.active or time.perf_counter() < self.next:
            return
        self.conn.execute("VACUUM (ANALYZE) " + ", ".join(self.TABLES))
        self.runs += 1
        self.next = time.perf_counter() + self.every

    def close(self) -> None:
        self.conn.close()


class Backends:
    """CPU of the postgres backends whose application_name is ``app``, summed over every
    backend seen: a backend born during the run counts from 0, one that exits keeps its
    last reading (what it used after that reading is lost)."""

    def __init__(self, dsn: str, app: str) -> None:
        import psycopg

        self.app = app
        self.conn = psycopg.connect(dsn, autocommit=True, application_name="swfbench-monitor")
        self.base = self._pids()
        self.last = dict(self.base)

    def _pids(self) -> dict[int, float]:
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (self.app,)
        ).fetchall()
        return {int(r[0]): _pid_cpu(int(r[0])) for r in rows}

    def used(self) -> float:
        self.last.update(self._pids())
        return sum(cpu - self.base.get(pid, 0.0) for pid, cpu in self.last.items())

    def close(self) -> None:
        self.conn.close()


# -- the store, read by the parent ------------------------------------------------------------
@contextmanager
def reader(spec: dict[str, Any]) -> Iterator[Callable[[str], list[tuple[Any, ...]]]]:
    """A read-only connection: ``query(sql)`` returns its rows."""
    if spec["store"] == "pg":
        import psycopg

        conn = psycopg.connect(
            spec["dsn"],
            autocommit=True,
            options=f"-c search_path={spec['schema']}",
            application_name="swfbench-soak-reader",
        )
        try:
            yield lambda q: [tuple(r) for r in conn.execute(q).fetchall()]
        finally:
            conn.close()
    else:
        lite = sqlite3.connect(spec["path"], isolation_level=None, timeout=30.0)
        try:
            yield lambda q: [tuple(r) for r in lite.execute(q).fetchall()]
        finally:
            lite.close()


# Not finished: a range of the wf_instances_active (status, type) index, at most `backlog`
# entries whatever the size of the finished history.
UNFINISHED = "SELECT count(*) FROM wf_instances WHERE status IN ('PENDING', 'RUNNING', 'STALLED')"


def sizes(spec: dict[str, Any], query: Callable[[str], list[tuple[Any, ...]]]) -> dict[str, Any]:
    """Rows and bytes of each table with its indexes (PostgreSQL: pg_total_relation_size;
    SQLite: the pages of its b-trees, from dbstat) and the SQLite file sizes."""
    out: dict[str, Any] = {}
    for table in TABLES:
        rows = int(query(f"SELECT count(*) FROM {table}")[0][0])
        if spec["store"] == "pg":
            size = int(query(f"SELECT pg_total_relation_size('{table}')")[0][0])
        else:
            got = query(
                "SELECT coalesce(sum(d.pgsize), 0) FROM dbstat d JOIN sqlite_master m "
                f"ON m.name = d.name WHERE m.tbl_name = '{table}'"
            )
            size = int(got[0][0])
        out[table] = {"rows": rows, "bytes": size}
    if spec["store"] == "sqlite":
        for suffix in ("", "-wal"):
            with suppress(FileNotFoundError):
                out[f"file{suffix or ''}"] = os.path.getsize(spec["path"] + suffix)
    return out


# -- the runner child -------------------------------------------------------------------------
def soak_child(spec: dict[str, Any], barrier: Any, stop: Any) -> dict[str, Any]:
    from statemachine_wf.runtime.runner import Runner, RunnerOptions

    from .workload import ThreeSteps

    store = open_store(spec)
    store.migrate()
    runner = Runner(store, [ThreeSteps], options=RunnerOptions(concurrency=spec["concurrency"]))
    warm_pool(store, spec["concurrency"] + 2)
    runner.start()
    barrier.wait(timeout=180)
    stop.wait()
    runner.stop(timeout=30)
    store.close()
    return {}


# -- the run ------------------------------------------------------------------------------------
def run(s: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    """Run the soak; returns its record (settings, samples, summary, sizes, statuses)."""
    from statemachine_wf.client.machine import Client

    from .workload import ThreeSteps

    if s.batch < 1 or s.backlog < s.batch or s.n < 1:
        raise SystemExit("need n >= 1 and backlog >= batch >= 1")
    own_tmp = not s.tmp
    if own_tmp:
        s.tmp = tempfile.mkdtemp(prefix="swfbench-soak-")
    spec: dict[str, Any] = {"store": s.store, "concurrency": s.threads()}
    if s.store == "pg":
        spec.update(dsn=s.dsn, schema=f"swfbench_soak_{os.getpid()}")
    else:
        spec["path"] = os.path.join(s.tmp, "soak.db")
    app = f"swfbench-soak-runner-{os.getpid()}"
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    stop = ctx.Event()
    results = ctx.Queue()
    proc = None
    client_store = None
    backends: Backends | None = None
    vacuums = 0
    try:
        fresh_store(spec)
        proc = ctx.Process(
            target=_child, args=(soak_child, dict(spec, app=app), barrier, stop, results)
        )
        proc.start()
        client_store = open_store(dict(spec, app="swfbench-soak-client", concurrency=0))
        warm_pool(client_store, 1)
        client = Client(client_store)
        try:
            barrier.wait(timeout=180)
        except Exception:
            out = _get(results, 30)
            raise RuntimeError(out.get("error", "the runner child did not start")) from None
        with reader(spec) as query:
            vacuum: Vacuum | None = None
            if s.store == "pg":
                backends = Backends(s.dsn, app)
                vacuum = Vacuum(s.dsn, spec["schema"], every=10.0)
                if vacuum.active:
                    log(
                        "   autovacuum is off on this server: the bench vacuums and analyzes "
                        "the hot tables every 10 s in its place"
                    )
            samples, fed_at = _drive(
                s, proc, client, ThreeSteps, query, backends, results, log, vacuum
            )
            if vacuum is not None:
                vacuums = vacuum.runs
                vacuum.close()
            statuses = dict(query("SELECT status, count(*) FROM wf_instances GROUP BY status"))
            stop.set()
            out = _get(results, 90)
            if "error" in out:
                raise RuntimeError(out["error"])
            table_sizes = sizes(spec, query)
    finally:
        stop.set()
        if backends is not None:
            backends.close()
        if client_store is not None:
            client_store.close()
        if proc is not None:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)
        with suppress(Exception):
            drop_store(spec)
        if own_tmp:
            shutil.rmtree(s.tmp, ignore_errors=True)
    return {
        "settings": {k: v for k, v in asdict(s).items() if k not in ("dsn", "tmp")},
        "threads": s.threads(),
        "cpus": os.cpu_count(),
        "samples": [asdict(x) for x in samples],
        "summary": summarize(samples, s, fed_at),
        "statuses": {str(k): int(v) for k, v in statuses.items()},
        "sizes": table_sizes,
        "vacuums_by_the_bench": vacuums,
    }


def _get(results: Any, timeout: float) -> dict[str, Any]:
    try:
        out: dict[str, Any] = results.get(timeout=timeout)
    except queue.Empty:
        return {"error": f"no word from the runner child in {timeout} s"}
    return out


def _drive(
    s: Settings,
    proc: Any,
    client: Any,
    workflow: Any,
    query: Callable[[str], list[tuple[Any, ...]]],
    backends: Backends | None,
    results: Any,
    log: Callable[[str], None],
    vacuum: Vacuum | None = None,
) -> tuple[list[Sample], int]:
    """Start instances in batches, keeping the backlog bounded, and sample until N are
    finished. Returns the samples and how many had finished when the last batch was
    started (from there on the backlog drains)."""
    pid = proc.pid
    t0 = time.perf_counter()
    cpu0 = _pid_cpu(pid)
    rss, threads = proc_status(pid)
    samples = [Sample(0.0, 0, rss, 0.0, 0.0, threads)]
    log(_row_head(s))
    created = fed_at = 0
    next_at = t0 + s.sample
    while True:
        if vacuum is not None:
            vacuum.maybe()
        unfinished = int(query(UNFINISHED)[0][0])
        done = created - unfinished
        now = time.perf_counter()
        if now >= next_at or done >= s.n:
            rss, threads = proc_status(pid)
            server = backends.used() if backends is not None else 0.0
            samples.append(Sample(now - t0, done, rss, _pid_cpu(pid) - cpu0, server, threads))
            log(_row(samples[-2], samples[-1]))
            next_at = max(next_at + s.sample, now + s.sample / 2)
        if done >= s.n:
            return samples, fed_at
        while created < s.n and unfinished + s.batch <= s.backlog:
            k = min(s.batch, s.n - created)
            client.start_many(workflow, [{"n": created + i} for i in range(k)])
            created += k
            unfinished += k
            if created == s.n:
                fed_at = done
        if now - t0 > s.timeout:
            raise TimeoutError(f"{done}/{s.n} finished after {s.timeout} s")
        with suppress(queue.Empty):
            out = results.get_nowait()  # the child only reports early when it failed
            raise RuntimeError(out.get("error", "the runner child stopped early"))
        if not proc.is_alive():
            raise RuntimeError(f"the runner child died (exit code {proc.exitcode})")
        time.sleep(0.05)


# -- the summary and the table ------------------------------------------------------------------
def _at(samples: list[Sample], completed: float, attr: str) -> float:
    """``attr`` interpolated at the moment ``completed`` instances had finished."""
    prev = samples[0]
    if completed <= prev.completed:
        return float(getattr(prev, attr))
    for cur in samples[1:]:
        if cur.completed >= completed:
            span = cur.completed - prev.completed
            frac = (completed - prev.completed) / span if span else 1.0
            a, b = getattr(prev, attr), getattr(cur, attr)
            return float(a + frac * (b - a))
        prev = cur
    return float(getattr(samples[-1], attr))


def _quarter(samples: list[Sample], lo: float, hi: float) -> dict[str, float]:
    t = _at(samples, hi, "elapsed") - _at(samples, lo, "elapsed")
    steps = (hi - lo) * STEPS
    cpu = _at(samples, hi, "cpu") - _at(samples, lo, "cpu")
    server = _at(samples, hi, "server_cpu") - _at(samples, lo, "server_cpu")
    return {
        "seconds": t,
        "steps_per_s": steps / t if t > 0 else 0.0,
        "cpu_ms_per_step": 1000 * cpu / steps,
        "server_ms_per_step": 1000 * server / steps,
    }


def summarize(samples: list[Sample], s: Settings, fed_at: int) -> dict[str, Any]:
    """RSS after warm-up; throughput and CPU per step of the first and last quarter of the
    steady part (the backlog full: up to ``fed_at`` finished) and of the drain after it.

    The steady part is compared with itself because the drain is not like it: the queue
    shrinks, and on SQLite a claim costs more with more due tasks (bench/README.md)."""
    n = samples[-1].completed
    warm_i = next(
        (i for i, x in enumerate(samples) if i and x.completed >= s.warmup * n), len(samples) - 1
    )
    after = samples[warm_i:]
    first_rss = after[0].rss_kib
    lo, hi = min(x.rss_kib for x in after), max(x.rss_kib for x in after)
    steady = fed_at if fed_at >= n / 2 else n  # else: no steady part, the whole run
    windows = [
        _window(a, b)[0] for a, b in itertools.pairwise(samples[warm_i:]) if b.completed <= steady
    ]
    windows = [w for w in windows if w > 0]
    deciles = statistics.quantiles(windows, n=10) if len(windows) >= 2 else [0.0] * 9
    first = _quarter(samples, 0, steady / 4)
    last = _quarter(samples, 3 * steady / 4, steady)
    drain = _quarter(samples, steady, n) if steady < n else None
    total = samples[-1].elapsed
    return {
        "completed": n,
        "seconds": total,
        "steps_per_s": n * STEPS / total if total > 0 else 0.0,
        "rss_start_mib": samples[0].rss_kib / 1024,
        "rss_warm_mib": first_rss / 1024,
        "rss_warm_at": after[0].completed,
        "rss_min_mib": lo / 1024,
        "rss_max_mib": hi / 1024,
        "rss_end_mib": samples[-1].rss_kib / 1024,
        "rss_max_ratio": hi / first_rss if first_rss else 0.0,
        "rss_min_ratio": lo / first_rss if first_rss else 0.0,
        "rss_flat": first_rss > 0 and hi <= 1.10 * first_rss and lo >= 0.90 * first_rss,
        "threads_min": min(x.threads for x in after),
        "threads_max": max(x.threads for x in after),
        "steady_until": steady,
        "first_quarter": first,
        "last_quarter": last,
        "drain": drain,
        "window_steps_p10": deciles[0],
        "window_steps_p50": deciles[4],
        "window_steps_p90": deciles[8],
    }


def _window(a: Sample, b: Sample) -> tuple[float, float, float]:
    """(steps/s, runner CPU ms/step, server CPU ms/step) between two samples."""
    steps = (b.completed - a.completed) * STEPS
    dt = b.elapsed - a.elapsed
    if steps <= 0:
        return 0.0, 0.0, 0.0
    return (
        steps / dt if dt > 0 else 0.0,
        1000 * (b.cpu - a.cpu) / steps,
        1000 * (b.server_cpu - a.server_cpu) / steps,
    )


def _row_head(s: Settings) -> str:
    server = f" {'server ms/step':>14}" if s.store == "pg" else ""
    return (
        f"{'elapsed s':>9} {'completed':>10} {'steps/s':>8} {'RSS MiB':>8}"
        f" {'cpu ms/step':>11}{server} {'threads':>7}"
    )


def _row(a: Sample, b: Sample) -> str:
    rate, cpu, server = _window(a, b)
    srv = f" {server:>14.2f}" if b.server_cpu or a.server_cpu else ""
    return (
        f"{b.elapsed:>9.1f} {b.completed:>10} {rate:>8.0f} {b.rss_kib / 1024:>8.1f}"
        f" {cpu:>11.2f}{srv} {b.threads:>7}"
    )


def table(record: dict[str, Any]) -> str:
    s = Settings(**record["settings"])
    samples = [Sample(**x) for x in record["samples"]]
    m = record["summary"]
    pg = s.store == "pg"
    head = _row_head(s)
    lines = [head, "-" * len(head)]
    lines += [_row(a, b) for a, b in itertools.pairwise(samples)]
    lines.append("")
    lines.append(
        f"soak {s.store}: {m['completed']} workflows x {STEPS} no-op steps, one runner "
        f"process ({record['threads']} threads), batches of {s.batch}, backlog <= "
        f"{s.backlog}, cpus={record['cpus']}: {m['seconds']:.1f} s, "
        f"{m['steps_per_s']:.0f} steps/s overall"
    )
    verdict = "met" if m["rss_flat"] else "NOT met"
    lines.append(
        f"RSS: {m['rss_start_mib']:.1f} MiB at start, {m['rss_warm_mib']:.1f} after warm-up "
        f"({m['rss_warm_at']} finished), then min {m['rss_min_mib']:.1f} / max "
        f"{m['rss_max_mib']:.1f} / end {m['rss_end_mib']:.1f} MiB; max/after-warm-up "
        f"{m['rss_max_ratio']:.3f}, min {m['rss_min_ratio']:.3f}: +-10% {verdict}"
        f" (threads {m['threads_min']}-{m['threads_max']})"
    )
    f, la = m["first_quarter"], m["last_quarter"]

    def q(x: dict[str, float]) -> str:
        srv = f"+{x['server_ms_per_step']:.2f}" if pg else ""
        return f"{x['steps_per_s']:.0f} steps/s, {x['cpu_ms_per_step']:.2f}{srv} ms CPU/step"

    ratio = la["steps_per_s"] / f["steps_per_s"] if f["steps_per_s"] else 0.0
    steady = m["steady_until"]
    what = f"backlog full, 0-{steady} finished" if m["drain"] else "no steady part: whole run"
    lines.append(
        f"steady ({what}): first quarter {q(f)}; last quarter {q(la)}; last/first "
        f"{ratio:.2f}; windows after warm-up p10/p50/p90 {m['window_steps_p10']:.0f}/"
        f"{m['window_steps_p50']:.0f}/{m['window_steps_p90']:.0f} steps/s"
    )
    if m["drain"]:
        lines.append(f"drain ({steady}-{m['completed']}, the backlog shrinking): {q(m['drain'])}")
    if record.get("vacuums_by_the_bench"):
        lines.append(
            f"autovacuum off on this server: the bench ran VACUUM (ANALYZE) of the hot tables "
            f"{record['vacuums_by_the_bench']} times (every 10 s; its CPU not counted)"
        )
    sz = record["sizes"]
    parts = []
    for t in TABLES:
        rows, size = sz[t]["rows"], sz[t]["bytes"]
        parts.append(f"{t} {rows} rows {size / 2**20:.1f} MiB")
    where = "pg_total_relation_size" if pg else "dbstat pages"
    files = ""
    if not pg:
        mib = {k: sz.get(k, 0) / 2**20 for k in ("file", "file-wal")}
        files = f"; file {mib['file']:.1f} MiB + wal {mib['file-wal']:.1f}"
    per = sz["wf_events"]["bytes"] + sz["wf_instances"]["bytes"]
    lines.append(
        f"at the end ({where}): {', '.join(parts)}{files}; "
        f"{per / max(1, m['completed']):.0f} bytes/workflow (instances + events)"
    )
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(record["statuses"].items()))
    lines.append(f"statuses: {statuses}")
    lines.append(
        "cpu ms/step: the runner process (utime+stime)"
        + (" + its postgres backends (application_name)" if pg else "")
        + " per step of the window; RSS: VmRSS of the runner process. "
        "Flat = RSS within +-10% of its value after warm-up; throughput: compare the "
        "quarters with the spread of the windows."
    )
    return "\n".join(lines)


def dump_json(record: dict[str, Any], path: str) -> None:
    with open(path, "w") as fh:
        json.dump(record, fh, indent=2)
