"""The core benchmark: N workflows of three no-op steps, every configuration in one run.

Each configuration gets a fresh PostgreSQL schema (or database, for DBOS) or a fresh
SQLite file, runs in ``spawn``-ed processes that meet the parent at a barrier, and is
timed from the barrier to the moment the parent sees the last instance COMPLETED (runner
configurations) or the last worker finish (raw SQL, DBOS). Nothing here asserts a timing.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import queue
import shutil
import sqlite3
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from . import targets

STEPS = 3
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
DBOS_DB = "swfbench_dbos"


def pg_dsn() -> str:
    return os.environ.get("SWF_TEST_PG_DSN", DEFAULT_DSN)


def _dsn_with_db(dsn: str, db: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(dsn)
    params["dbname"] = db
    return make_conninfo(**params)


def _dbos_pg_url(dsn: str) -> str:
    """DBOS wants a SQLAlchemy-style URL."""
    from psycopg.conninfo import conninfo_to_dict

    p = conninfo_to_dict(dsn)
    auth = p.get("user", "postgres") + (f":{p['password']}" if p.get("password") else "")
    host = f"{p.get('host', '127.0.0.1')}:{p.get('port', 5432)}"
    return f"postgresql://{auth}@{host}/{DBOS_DB}?application_name=swfbench-dbos"


# -- configuration and result records ---------------------------------------------------
@dataclass
class Result:
    name: str
    store: str  # "pg" | "sqlite"
    system: str  # "swf" | "raw" | "dbos"
    procs: int
    workflows: int
    seconds: float
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def steps_per_s(self) -> float:
        return self.workflows * STEPS / self.seconds if self.seconds > 0 else 0.0

    @property
    def wf_per_s(self) -> float:
        return self.workflows / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Settings:
    n: int = 1000
    procs: int = 4
    pg_concurrency: int = 8
    # The library's default (RunnerOptions.concurrency) since session 44; four before,
    # from the early sessions (bench/README.md, "Session 44").
    sqlite_concurrency: int = 8
    latency_samples: int = 200
    dsn: str = field(default_factory=pg_dsn)
    timeout: float = 600.0
    tmp: str = ""
    metrics: bool = False
    """The runners count into a WorkerMetrics (``worker --metrics-port``'s instruments)."""
    dashboard: bool = False
    """A dashboard process is open on the store during the timed run (see open_dashboard)."""
    count: bool = False
    """The runners' statements, claims and sleeps counted (bench/statements.py's counters),
    summed over the processes of a runner row and printed per workflow after the table."""
    runner_connections: int = 0
    """The PostgreSQL stores' ``runner_connections`` (0: the library's default)."""


# -- stores -------------------------------------------------------------------------
def open_store(spec: dict[str, Any]) -> Any:
    if spec["store"] == "pg":
        from statemachine_wf.stores.postgres import PostgresStore

        dsn = spec["dsn"]
        if spec.get("app"):
            dsn = with_app(dsn, spec["app"])
        # The library's default pool (DEFAULT_POOL_SIZE), as a user's runner has it; the
        # DAG runs may give their DAG commits connections of their own (bench dag).
        return PostgresStore(
            dsn,
            schema=spec["schema"],
            dag_connections=spec.get("dag_connections", 0),
            **({"dag_sticky": spec["dag_sticky"]} if "dag_sticky" in spec else {}),
            **(
                {"runner_connections": spec["runner_connections"]}
                if spec.get("runner_connections")
                else {}
            ),
        )
    from statemachine_wf.stores.sqlite import SQLiteStore

    return SQLiteStore(spec["path"])


def warm_pool(store: Any, k: int, *, dags: bool = False) -> None:
    """Open ``k`` pool connections before the clock starts (psycopg_pool grows lazily):
    at most as many as the store's calls hold at once, or (``dags``) as many as its DAG
    node commits may add to those."""
    pool = getattr(store, "_pool", None)
    if pool is None:
        return
    conns = [
        pool.getconn(timeout=30)
        for _ in range(min(k, store.pool_size if not dags else pool.max_size))
    ]
    for conn in conns:
        pool.putconn(conn)


def fresh_store(spec: dict[str, Any]) -> None:
    """Create the schema (or file) of a configuration, empty."""
    if spec["store"] == "pg":
        import psycopg
        from psycopg import sql

        with psycopg.connect(spec["dsn"], autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(spec["schema"]))
            )
    else:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(spec["path"] + suffix)
    store = open_store(spec)
    store.migrate()
    store.close()


def child_result(stop: Any, results: Any) -> dict[str, Any]:
    """Tell a latency run's runner child to stop and take its report (raise its error)."""
    stop.set()
    out: dict[str, Any] = results.get(timeout=60)
    if "error" in out:
        raise RuntimeError(out["error"])
    return out


def stop_child(stop: Any, proc: Any, client_store: Any, spec: dict[str, Any]) -> None:
    """Stop a latency run's runner child (killed after 60 s), close the store, drop it."""
    stop.set()
    proc.join(timeout=60)
    if proc.is_alive():
        proc.kill()
    client_store.close()
    drop_store(spec)


def drop_store(spec: dict[str, Any]) -> None:
    if spec["store"] == "pg":
        import psycopg
        from psycopg import sql

        with psycopg.connect(spec["dsn"], autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(spec["schema"]))
            )
    else:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(spec["path"] + suffix)


def precreate(spec: dict[str, Any], n: int) -> float:
    """Start ``n`` instances of the spec's workflow (``workload.WORKFLOWS``, default the
    three steps) with Client.start, sequentially; returns the seconds taken."""
    from statemachine_wf.client.machine import Client

    from .workload import WORKFLOWS

    workflow = WORKFLOWS[spec.get("workflow", "three")]
    store = open_store(spec)
    client = Client(store)
    warm_pool(store, 1)
    t0 = time.perf_counter()
    for i in range(n):
        client.start(workflow, {"n": i})
    elapsed = time.perf_counter() - t0
    store.close()
    return elapsed


@contextlib.contextmanager
def watcher(spec: dict[str, Any]) -> Iterator[Callable[[], tuple[int, int]]]:
    """A read-only connection answering (completed, total) for the parent's polling."""
    q = "SELECT count(*) FILTER (WHERE status = 'COMPLETED'), count(*) FROM wf_instances"
    if spec["store"] == "pg":
        import psycopg

        conn = psycopg.connect(
            spec["dsn"], autocommit=True, options=f"-c search_path={spec['schema']}"
        )

        def count() -> tuple[int, int]:
            row = conn.execute(q).fetchone()
            assert row is not None
            return int(row[0]), int(row[1])

        try:
            yield count
        finally:
            conn.close()
    else:
        lite = sqlite3.connect(spec["path"], isolation_level=None)

        def count() -> tuple[int, int]:
            row = lite.execute(q).fetchone()
            return int(row[0]), int(row[1])

        try:
            yield count
        finally:
            lite.close()


# -- CPU accounting (Linux /proc) ---------------------------------------------------------
def proc_cpu(comm: str) -> float:
    """CPU seconds of every live process called ``comm``, plus that of its reaped children.

    For postgres the postmaster's cutime/cstime hold the CPU of backends that have exited.
    """
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                raw = fh.read()
        except OSError:
            continue
        if raw[raw.index("(") + 1 : raw.rindex(")")] == comm:
            fields = raw[raw.rindex(")") + 2 :].split()
            total += sum(int(x) for x in fields[11:15])
    return total / tick


def _pid_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            raw = fh.read()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BackendCPU:
    """CPU of the postgres backends whose application_name is ``app`` (same machine)."""

    def __init__(self, dsn: str, app: str) -> None:
        import psycopg

        self.app = app
        self.conn = psycopg.connect(dsn, autocommit=True, application_name="swfbench-monitor")
        self.start = self._snapshot()

    def _snapshot(self) -> dict[int, float]:
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (self.app,)
        ).fetchall()
        return {int(r[0]): _pid_cpu(int(r[0])) for r in rows}

    def used(self) -> float:
        end = self._snapshot()
        self.conn.close()
        return sum(cpu - self.start.get(pid, 0.0) for pid, cpu in end.items())


def measured(
    spec: dict[str, Any], runner: Any, store: Any, stop: Any, counted: Any, *, start: bool
) -> dict[str, Any]:
    """This process's CPU and its backends' (``spec["app"]``) from now until ``stop`` is
    set (the runner started first if ``start``); then the runner stopped and the store
    closed. With ``counted`` (statements._Counted), its counts as well."""
    c0 = time.process_time()
    backends = BackendCPU(spec["dsn"], spec["app"]) if spec["store"] == "pg" else None
    if start:
        runner.start()
    stop.wait()
    cpu = time.process_time() - c0
    pg_cpu = backends.used() if backends is not None else 0.0
    runner.stop(timeout=30)
    store.close()
    out: dict[str, Any] = {"cpu": cpu, "pg_cpu": pg_cpu}
    if counted is not None:
        out["counts"] = counted.summary()
    return out


def with_app(dsn: str, app: str) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(dsn, application_name=app)


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, every tenant included."""
    with open("/proc/stat") as fh:
        v = [int(x) for x in fh.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


# -- process groups ---------------------------------------------------------------------
def _child(
    target: Callable[..., dict[str, Any]],
    spec: dict[str, Any],
    barrier: Any,
    stop: Any,
    results: Any,
    ended: Any = None,
) -> None:
    if ended is not None:
        from . import workload

        workload.ENDED = ended
    try:
        out = target(spec, barrier, stop)
    except BaseException:
        with contextlib.suppress(Exception):
            barrier.abort()
        out = {"error": traceback.format_exc()}
    results.put(out)


def run_group(
    target: Callable[..., dict[str, Any]],
    specs: list[dict[str, Any]],
    *,
    poll: Callable[[], tuple[int, int]] | None = None,
    expect: int = 0,
    timeout: float = 600.0,
    ends_counted: bool = False,
) -> tuple[float, list[dict[str, Any]]]:
    """Run ``target(spec, barrier, stop)`` in one spawned process per spec.

    The clock starts when every child and the parent have met at the barrier. With
    ``poll`` the parent watches the database until ``expect`` instances are COMPLETED,
    then tells the children to stop; without it, it waits for them to finish and the
    clock stops at the latest child's own end time (CLOCK_MONOTONIC is system-wide).
    ``ends_counted``: the children count the workflows whose last step ran
    (``workload.ENDED``, in shared memory), and the database is polled only once that
    count reaches ``expect``: a reader of the database every few milliseconds all the
    run long is a load the raw and DBOS rows, which time themselves, do not carry
    (bench/README.md, "Session 55").
    """
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(specs) + 1)
    stop = ctx.Event()
    results = ctx.Queue()
    ended = ctx.Value("q", 0)
    procs = [
        ctx.Process(target=_child, args=(target, s, barrier, stop, results, ended), daemon=True)
        for s in specs
    ]
    for p in procs:
        p.start()
    outs: list[dict[str, Any]] = []
    try:
        try:
            barrier.wait(timeout=180)
        except Exception:
            stop.set()
            outs = [results.get(timeout=30) for _ in procs]
            errors = [o["error"] for o in outs if "error" in o]
            raise RuntimeError(errors[0] if errors else "barrier broken") from None
        t0 = time.perf_counter()
        b0, a0 = machine_busy()
        elapsed: float | None = None
        busy_end: tuple[float, float] | None = None
        if poll is not None:
            deadline = t0 + timeout
            while True:
                done = -1 if ends_counted and ended.value < expect else poll()[0]
                if done >= expect:
                    elapsed = time.perf_counter() - t0
                    # Now, not after the children stopped: their shutdown (the listener's
                    # 1 s poll, pool close) would dilute the figure of a run of seconds.
                    busy_end = machine_busy()
                    break
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"{done}/{expect} completed after {timeout} s")
                try:
                    # A crashed child would otherwise leave us polling until the deadline.
                    out = results.get_nowait()
                    outs.append(out)
                    if "error" in out:
                        raise RuntimeError(out["error"])
                except queue.Empty:
                    pass
                time.sleep(0.002 if ends_counted else 0.005)
        stop.set()
        while len(outs) < len(procs):
            outs.append(results.get(timeout=timeout))
        b1, a1 = busy_end or machine_busy()
        for o in outs:
            if "error" in o:
                raise RuntimeError(o["error"])
        if elapsed is None:
            elapsed = max(o["t1"] for o in outs) - t0
        outs.append(
            {
                "client_cpu": sum(o.get("cpu", 0.0) for o in outs),
                "pg_cpu": sum(o.get("pg_cpu", 0.0) for o in outs),
                "busy": (b1 - b0) / max(1, a1 - a0),
            }
        )
        return elapsed, outs
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()


# -- statemachine_wf runners ------------------------------------------------------------
def runner_child(spec: dict[str, Any], barrier: Any, stop: Any) -> dict[str, Any]:
    from statemachine_wf.client.machine import Client
    from statemachine_wf.runtime.runner import Runner, RunnerOptions

    from .workload import WORKFLOWS

    workflow = WORKFLOWS[spec.get("workflow", "three")]
    spec = dict(spec, app=f"swfbench-{os.getpid()}")
    store = open_store(spec)
    store.migrate()
    host = spec.get("host", True)  # False: a producer only (an API process), no runner
    observer = None
    if spec.get("metrics"):
        from statemachine_wf.runtime.observe import Observer, WorkerMetrics

        observer = Observer(WorkerMetrics())
    runner = Runner(
        store,
        [workflow],
        options=RunnerOptions(concurrency=spec["concurrency"]),
        observer=observer,
    )
    warm_pool(store, spec["concurrency"] + 2)
    counted = None
    if spec.get("count"):
        from .statements import _Counted

        counted = _Counted(store)
    client = Client(store)
    produce = spec.get("produce", 0)
    barrier.wait(timeout=180)
    t0 = time.perf_counter()
    c0 = time.process_time()
    backends = BackendCPU(spec["dsn"], spec["app"]) if spec["store"] == "pg" else None
    if host:
        runner.start()
    for i in range(produce):
        client.start(workflow, {"n": i})
    t_produced = time.perf_counter()
    stop.wait()
    cpu = time.process_time() - c0
    pg_cpu = backends.used() if backends is not None else 0.0
    if host:
        runner.stop(timeout=30)
    store.close()
    out: dict[str, Any] = {"t0": t0, "t_produced": t_produced, "cpu": cpu, "pg_cpu": pg_cpu}
    if counted is not None:
        out["counts"] = counted.summary()
    return out


def run_swf(s: Settings, store: str, procs: int, *, e2e: bool = False, api: bool = False) -> Result:
    """``procs`` runner processes on ``s.n`` three-step workflows: pre-created, or (``e2e``)
    each process starting its share, or (``api``) a process of its own starting them all,
    as an API server does (its row is not one of the issue's targets)."""
    tag = f"{store}_{'api' if api else 'e2e' if e2e else 'run'}_{procs}p"
    spec = _spec(s, store, tag)
    spec["concurrency"] = s.pg_concurrency if store == "pg" else s.sqlite_concurrency
    fresh_store(spec)
    extra: dict[str, Any] = {"concurrency": spec["concurrency"]}
    specs = []
    if api:
        specs = [dict(spec) for _ in range(procs)] + [dict(spec, produce=s.n, host=False)]
    elif e2e:
        share = [s.n // procs + (1 if i < s.n % procs else 0) for i in range(procs)]
        specs = [dict(spec, produce=k) for k in share]
    else:
        start_s = precreate(spec, s.n)
        extra["start_per_s"] = s.n / start_s
        specs = [dict(spec) for _ in range(procs)]
    name = f"swf {store} {procs}p" + (" e2e (start+run)" if e2e else "")
    if api:
        name = f"swf {store} {procs}p, started by a 5th"  # not "e2e": not the row
    try:
        opened = open_dashboard(spec) if s.dashboard else contextlib.nullcontext({})
        with opened as dash, watcher(spec) as count:
            elapsed, outs = run_group(
                runner_child, specs, poll=count, expect=s.n, timeout=s.timeout, ends_counted=True
            )
            done, _ = count()
        extra.update(outs[-1], completed=done, **dash)
        if s.count:
            extra["counts"] = _summed([out.get("counts", {}) for out in outs])
        note = f"conc {spec['concurrency']}/proc"
        if not e2e and not api:
            note += f"; start() {extra['start_per_s']:.0f}/s"
        system = "swf-api" if api else "swf"
        return Result(name, store, system, procs, s.n, elapsed, note=note, extra=extra)
    finally:
        drop_store(spec)


@contextlib.contextmanager
def open_dashboard(spec: dict[str, Any], every: float = 1.0) -> Iterator[dict[str, Any]]:
    """``statemachine-wf dashboard`` on the configuration's store, in its own process, and
    what an open browser tab plus a Prometheus scrape ask of it: the overview, the first
    page of instances and ``/metrics``, every ``every`` seconds. Yields a dict that gets
    the number of polls and the dashboard process's CPU seconds when the block ends."""
    import socket
    import subprocess
    import sys
    import threading
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    if spec["store"] == "pg":
        db = ["--db", spec["dsn"], "--schema", spec["schema"]]
    else:
        db = ["--db", f"sqlite:///{spec['path']}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "statemachine_wf.cli", *db, "dashboard", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(base + "/", timeout=5).read()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("the dashboard did not start") from None
            time.sleep(0.2)
    stop = threading.Event()
    out: dict[str, Any] = {"dashboard_polls": 0}

    def poll() -> None:
        while not stop.wait(every):
            for path in ("/", "/instances", "/metrics"):
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(base + path, timeout=10).read()
            out["dashboard_polls"] += 1

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        yield out
    finally:
        stop.set()
        poller.join(timeout=15)
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/{proc.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            out["dashboard_cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


# -- raw SQL: the physical limit of the same writes -------------------------------------
RAW_PG = """
WITH inst AS (
    UPDATE wf_instances
    SET status = 'RUNNING', step = %(next)s, step_attempts = 1, attempts = %(attempts)s,
        progress = '{}', version = version + 1, updated_at = now()
    WHERE id = %(id)s AND version = %(version)s
    RETURNING id, version
), ev AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, worker)
    SELECT inst.id, v.node, v.event_type, 1, v.payload, %(worker)s
    FROM inst, (VALUES (%(node)s, 'STEP_COMPLETED', %(payload)s::jsonb),
                       (%(next)s, 'STEP_STARTED', '{}'::jsonb)) AS v (node, event_type, payload)
), task AS (
    UPDATE wf_tasks t
    SET node = %(next)s, attempt = 1, in_flight = true, failures = 0,
        lease_owner = %(worker)s,
        due_at = CASE WHEN %(lease)s THEN now() + interval '30 seconds' ELSE t.due_at END
    FROM inst WHERE t.instance_id = %(id)s AND t.slot = ''
)
SELECT version FROM inst
"""
# The lease is taken by a workflow's first step and kept by the next two, as swf's claim
# and continues do (a continue renews it only once half used): the same writes, so on
# PostgreSQL the same in-place (HOT) updates of the task's row. The task is reached by its
# key from the parameter: joined to `inst` alone, the plan made while the table was small
# walked the whole task index on every step (bench/README.md, "Session 40").

RAW_PG_CREATE = """
WITH ins AS (
    INSERT INTO wf_instances (id, type, kind, status, step, input, priority)
    VALUES (%(id)s, 'raw.three', 'machine', 'PENDING', 'a', %(input)s, 100)
    RETURNING id, type, version
), ev AS (
    INSERT INTO wf_events (instance_id, event_type, payload)
    SELECT id, 'WORKFLOW_CREATED', %(input)s FROM ins
), task AS (
    INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at)
    SELECT id, '', 'a', 'machine', type, 100, now() FROM ins
)
SELECT version FROM ins
"""
# An end-to-end run's start, raw: `create`'s three inserts (the instance, WORKFLOW_CREATED,
# the task) in one statement, with a time-ordered id as Client.start makes. The raw
# end-to-end row runs it and then RAW_PG's three steps on the new instance: the same writes
# as a start and its run, where the plain raw row has the three steps alone.

RAW_LITE_INSTANCE = (
    "UPDATE wf_instances SET status = 'RUNNING', step = ?, step_attempts = 1, attempts = ?,"
    " progress = '{}', version = version + 1, updated_at = ? WHERE id = ? AND version = ?"
)
RAW_LITE_EVENT = (
    "INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker,"
    " created_at) VALUES (?, ?, ?, 1, ?, NULL, ?, ?)"
)
RAW_LITE_TASK = (
    "UPDATE wf_tasks SET node = ?, attempt = 1, in_flight = 1, failures = 0, lease_owner = ?,"
    " due_at = CASE WHEN ? THEN ? ELSE due_at END WHERE instance_id = ? AND slot = ''"
)
PATH = (("a", "b"), ("b", "c"), ("c", "done"))


def raw_child(spec: dict[str, Any], barrier: Any, stop: Any) -> dict[str, Any]:
    items: list[tuple[str, int]] = spec["items"]
    worker = f"raw-{os.getpid()}"
    if spec["store"] == "pg":
        import psycopg
        from psycopg.types.json import Jsonb

        conn = psycopg.connect(
            spec["dsn"], autocommit=True, options=f"-c search_path={spec['schema']}"
        )
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        barrier.wait(timeout=180)
        t0 = time.perf_counter()
        c0 = time.process_time()
        b0 = _pid_cpu(backend)
        for iid, version in items:
            if spec.get("e2e"):  # started here first, each (RAW_PG_CREATE)
                made = conn.execute(RAW_PG_CREATE, {"id": iid, "input": Jsonb({"n": 0})})
                version = made.fetchone()[0]  # type: ignore[index]
            attempts: dict[str, int] = {}
            for node, nxt in PATH:
                attempts[nxt] = 1
                row = conn.execute(
                    RAW_PG,
                    {
                        "id": iid,
                        "version": version,
                        "node": node,
                        "next": nxt,
                        "attempts": Jsonb(attempts),
                        "payload": Jsonb({"progress": {}, "to": nxt}),
                        "worker": worker,
                        "lease": node == PATH[0][0],
                    },
                ).fetchone()
                if row is None:
                    raise RuntimeError(f"raw CAS lost on {iid}")
                version = row[0]
        t1 = time.perf_counter()
        cpu = time.process_time() - c0
        pg_cpu = _pid_cpu(backend) - b0
        conn.close()
    else:
        lite = sqlite3.connect(spec["path"], timeout=30.0, isolation_level=None)
        lite.execute("PRAGMA journal_mode=WAL")
        lite.execute("PRAGMA synchronous=FULL")
        lite.execute("PRAGMA foreign_keys=ON")
        barrier.wait(timeout=180)
        t0 = time.perf_counter()
        c0 = time.process_time()
        for iid, version in items:
            attempts = {}
            for node, nxt in PATH:
                attempts[nxt] = 1
                now = time.time()
                lite.execute("BEGIN IMMEDIATE")
                cur = lite.execute(
                    RAW_LITE_INSTANCE, (nxt, json.dumps(attempts), now, iid, version)
                )
                if cur.rowcount != 1:
                    raise RuntimeError(f"raw CAS lost on {iid}")
                lite.executemany(
                    RAW_LITE_EVENT,
                    [
                        (
                            iid,
                            node,
                            "STEP_COMPLETED",
                            json.dumps({"progress": {}, "to": nxt}),
                            worker,
                            now,
                        ),
                        (iid, nxt, "STEP_STARTED", "{}", worker, now),
                    ],
                )
                lite.execute(RAW_LITE_TASK, (nxt, worker, node == PATH[0][0], now + 30.0, iid))
                lite.execute("COMMIT")
                version += 1
        t1 = time.perf_counter()
        cpu = time.process_time() - c0
        pg_cpu = 0.0
        lite.close()
    return {"t0": t0, "t1": t1, "cpu": cpu, "pg_cpu": pg_cpu}


def _versions(spec: dict[str, Any]) -> list[tuple[str, int]]:
    q = "SELECT id, version FROM wf_instances ORDER BY created_at"
    if spec["store"] == "pg":
        import psycopg

        with psycopg.connect(
            spec["dsn"], autocommit=True, options=f"-c search_path={spec['schema']}"
        ) as conn:
            return [(str(r[0]), int(r[1])) for r in conn.execute(q).fetchall()]
    lite = sqlite3.connect(spec["path"])
    try:
        return [(str(r[0]), int(r[1])) for r in lite.execute(q).fetchall()]
    finally:
        lite.close()


def run_raw(s: Settings, store: str, procs: int, *, e2e: bool = False) -> Result:
    """Raw SQL's three steps a workflow on pre-created instances; with ``e2e`` (PostgreSQL
    only) each instance is inserted first by the same process, as a start is."""
    spec = _spec(s, store, f"{store}_raw{'_e2e' if e2e else ''}_{procs}p")
    fresh_store(spec)
    try:
        if e2e:
            from statemachine_wf.definition.ids import new_instance_id

            items = [(new_instance_id(), 0) for _ in range(s.n)]
        else:
            precreate(spec, s.n)
            items = _versions(spec)
        specs = [dict(spec, items=items[i::procs], e2e=e2e) for i in range(procs)]
        elapsed, outs = run_group(raw_child, specs, timeout=s.timeout)
        what = "1 CTE statement" if store == "pg" else "BEGIN IMMEDIATE..COMMIT, FULL"
        return Result(
            f"raw SQL {store} {procs}p" + (" e2e (start+run)" if e2e else ""),
            store,
            "raw",
            procs,
            s.n,
            elapsed,
            note=f"{what} per step" + (", and 1 per start" if e2e else ""),
            extra=outs[-1],
        )
    finally:
        drop_store(spec)


# -- DBOS -----------------------------------------------------------------------------
def dbos_child(spec: dict[str, Any], barrier: Any, stop: Any) -> dict[str, Any]:
    import logging

    from dbos import DBOS

    DBOS(config={"name": "swfbench", "system_database_url": spec["url"], "log_level": "ERROR"})

    @DBOS.step()
    def s1(i: int) -> int:
        return i

    @DBOS.step()
    def s2(i: int) -> int:
        return i

    @DBOS.step()
    def s3(i: int) -> int:
        return i

    @DBOS.workflow()
    def three(i: int) -> int:
        s1(i)
        s2(i)
        return s3(i)

    DBOS.launch()
    logging.getLogger("dbos").setLevel(logging.ERROR)
    three(-1)  # warm-up: first-use costs outside the clock
    barrier.wait(timeout=180)
    t0 = time.perf_counter()
    c0 = time.process_time()
    pg = spec["url"].startswith("postgresql")
    backends = BackendCPU(spec["dsn"], "swfbench-dbos") if pg else None
    handles = [DBOS.start_workflow(three, i) for i in range(spec["n"])]
    t_started = time.perf_counter()
    for h in handles:
        h.get_result()
    t1 = time.perf_counter()
    cpu = time.process_time() - c0
    pg_cpu = backends.used() if backends is not None else 0.0
    DBOS.destroy()
    return {"t0": t0, "t1": t1, "t_started": t_started, "cpu": cpu, "pg_cpu": pg_cpu}


def run_dbos(s: Settings, store: str) -> Result:
    spec: dict[str, Any] = {"n": s.n, "dsn": s.dsn}
    if store == "pg":
        import psycopg
        from psycopg import sql

        with psycopg.connect(s.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(DBOS_DB)))
        spec["url"] = _dbos_pg_url(s.dsn)
    else:
        path = os.path.join(s.tmp, "dbos.sqlite")
        spec["url"] = f"sqlite:///{path}"
    try:
        elapsed, outs = run_group(dbos_child, [spec], timeout=s.timeout)
        started = outs[0]["t_started"] - outs[0]["t0"]
        return Result(
            f"DBOS {store} 1p e2e (start+run)",
            store,
            "dbos",
            1,
            s.n,
            elapsed,
            note=f"start_workflow+get_result; starts {s.n / started:.0f}/s",
            extra=outs[-1],
        )
    finally:
        if store == "pg":
            import psycopg
            from psycopg import sql

            with psycopg.connect(s.dsn, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(DBOS_DB)
                    )
                )


# -- start -> first step latency ---------------------------------------------------------
def latency_child(spec: dict[str, Any], barrier: Any, stop: Any) -> dict[str, Any]:
    from statemachine_wf.runtime.runner import Runner, RunnerOptions

    from . import workload

    workload.REPORT = spec["report"]
    store = open_store(spec)
    store.migrate()
    runner = Runner(
        store, [workload.ThreeSteps], options=RunnerOptions(concurrency=spec["concurrency"])
    )
    warm_pool(store, spec["concurrency"] + 2)
    runner.start()
    time.sleep(0.5)  # every worker is idle, waiting for work
    barrier.wait(timeout=180)
    stop.wait()
    runner.stop(timeout=30)
    store.close()
    return {"t0": 0.0, "t1": 0.0}


def _latency_child_entry(
    spec: dict[str, Any], barrier: Any, stop: Any, results: Any, report: Any
) -> None:
    spec = dict(spec, report=report)
    _child(latency_child, spec, barrier, stop, results)


def run_latency(s: Settings, store: str) -> Result:
    from statemachine_wf.client.machine import Client

    spec = _spec(s, store, f"{store}_latency")
    spec["concurrency"] = s.pg_concurrency if store == "pg" else s.sqlite_concurrency
    fresh_store(spec)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    stop = ctx.Event()
    results = ctx.Queue()
    report = ctx.Queue()
    proc = ctx.Process(
        target=_latency_child_entry, args=(spec, barrier, stop, results, report), daemon=True
    )
    proc.start()
    client_store = open_store(spec)
    try:
        client = Client(client_store)
        warm_pool(client_store, 1)
        barrier.wait(timeout=180)
        load = os.getloadavg()[0]  # the machine's, before the samples (the goal's condition)
        firsts, calls = _sample_latency(s, client, report)
        child_result(stop, results)
    finally:
        stop_child(stop, proc, client_store, spec)
    note = "runner idle in another process; perf_counter (CLOCK_MONOTONIC)"
    result = _latency_result(f"latency {store}: start -> first step", store, firsts, calls, note)
    result.extra["load"] = load
    return result


def run_latency_local(s: Settings, store: str) -> Result:
    """As run_latency, the client in the runner's process, on its store object: the start
    is handed to an idle worker of that process (PostgreSQL: leased to it in the start's
    own commit, docs/architecture.md, "A start kept in its process")."""
    import queue

    from statemachine_wf.client.machine import Client
    from statemachine_wf.runtime.runner import Runner, RunnerOptions

    from . import workload

    spec = _spec(s, store, f"{store}_latency_local")
    spec["concurrency"] = s.pg_concurrency if store == "pg" else s.sqlite_concurrency
    fresh_store(spec)
    report: queue.SimpleQueue[Any] = queue.SimpleQueue()
    workload.REPORT = report
    the_store = open_store(spec)
    try:
        the_store.migrate()
        options = RunnerOptions(concurrency=spec["concurrency"])
        runner = Runner(the_store, [workload.ThreeSteps], options=options)
        warm_pool(the_store, spec["concurrency"] + 2)
        runner.start()
        time.sleep(0.5)  # every worker is idle, waiting for work
        try:
            firsts, calls = _sample_latency(s, Client(the_store), report)
        finally:
            runner.stop(timeout=30)
    finally:
        workload.REPORT = None
        the_store.close()
        drop_store(spec)
    note = "client and idle runner in one process; perf_counter"
    name = f"latency {store}: same process"
    return _latency_result(name, store, firsts, calls, note)


def _sample_latency(s: Settings, client: Any, report: Any) -> tuple[list[float], list[float]]:
    """Sequential starts, each after the runner went idle: start -> first step's action,
    and the start() call's own time, in ms (after five for warm-up)."""
    from .workload import ThreeSteps

    firsts: list[float] = []
    calls: list[float] = []
    warmup = 5
    for i in range(s.latency_samples + warmup):
        t0 = time.perf_counter()
        iid = client.start(ThreeSteps, {"n": i})
        t_returned = time.perf_counter()
        got, what, t_first = report.get(timeout=30)
        if (got, what) != (iid, "first"):
            raise RuntimeError(f"unexpected report {(got, what)} for {iid}")
        got, what, _ = report.get(timeout=30)  # the last step: the runner goes idle
        if i >= warmup:
            firsts.append((t_first - t0) * 1000)
            calls.append((t_returned - t0) * 1000)
        time.sleep(0.02)  # let every worker go back to waiting
    return firsts, calls


def _latency_result(
    name: str, store: str, firsts: list[float], calls: list[float], note: str
) -> Result:
    extra = {
        "p50_ms": _pct(firsts, 50),
        "p90_ms": _pct(firsts, 90),
        "p99_ms": _pct(firsts, 99),
        "max_ms": max(firsts),
        "start_call_p50_ms": _pct(calls, 50),
        "start_call_p99_ms": _pct(calls, 99),
        "samples": len(firsts),
    }
    return Result(
        name, store, "latency", 2, len(firsts), sum(firsts) / 1000, extra=extra, note=note
    )


def _summed(counts: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    """The processes' counts added up: name -> [calls or times, server CPU seconds]."""
    total: dict[str, list[float]] = {}
    for one in counts:
        for name, (calls, cpu) in one.items():
            sums = total.setdefault(name, [0, 0.0])
            sums[0] += calls
            sums[1] += cpu
    return total


def counts_report(results: list[Result]) -> str:
    """Per workflow, for each row counted (``--count``): each statement's calls and its
    server CPU a call, then the claims that came back empty, the wake-ups and sleeps."""
    lines = []
    for r in results:
        counts = r.extra.get("counts")
        if not counts:
            continue
        lines.append(f"{r.name}, per workflow:")
        for name, (calls, cpu) in sorted(counts.items(), key=lambda kv: -kv[1][0]):
            if calls / r.workflows < 0.005:
                continue
            server = f"  server {cpu / calls * 1000:6.3f} ms a call" if cpu else ""
            lines.append(f"  {name:42s} {calls / r.workflows:6.2f}{server}")
    return "\n".join(lines)


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


# -- the run ----------------------------------------------------------------------------
def _spec(s: Settings, store: str, tag: str) -> dict[str, Any]:
    if store == "pg":
        spec = {"store": "pg", "dsn": s.dsn, "schema": f"swfbench_{tag}_{os.getpid()}"}
    else:
        spec = {"store": "sqlite", "path": os.path.join(s.tmp, f"{tag}.db")}
    return {
        **spec,
        "metrics": s.metrics,
        "count": s.count,
        "runner_connections": s.runner_connections,
    }


CONFIGS: dict[str, Callable[[Settings], Result]] = {
    "raw-sqlite-1": lambda s: run_raw(s, "sqlite", 1),
    "raw-sqlite-n": lambda s: run_raw(s, "sqlite", s.procs),
    "swf-sqlite-1": lambda s: run_swf(s, "sqlite", 1),
    "swf-sqlite-n": lambda s: run_swf(s, "sqlite", s.procs),
    "e2e-sqlite-1": lambda s: run_swf(s, "sqlite", 1, e2e=True),
    "dbos-sqlite": lambda s: run_dbos(s, "sqlite"),
    "raw-pg-1": lambda s: run_raw(s, "pg", 1),
    "raw-pg-n": lambda s: run_raw(s, "pg", s.procs),
    "raw-e2e-pg-1": lambda s: run_raw(s, "pg", 1, e2e=True),
    "raw-e2e-pg-n": lambda s: run_raw(s, "pg", s.procs, e2e=True),
    "swf-pg-1": lambda s: run_swf(s, "pg", 1),
    "swf-pg-n": lambda s: run_swf(s, "pg", s.procs),
    "e2e-pg-1": lambda s: run_swf(s, "pg", 1, e2e=True),
    "e2e-pg-n": lambda s: run_swf(s, "pg", s.procs, e2e=True),
    "api-pg-n": lambda s: run_swf(s, "pg", s.procs, api=True),
    "dbos-pg": lambda s: run_dbos(s, "pg"),
    "latency-pg": lambda s: run_latency(s, "pg"),
    "latency-sqlite": lambda s: run_latency(s, "sqlite"),
    "latency-pg-local": lambda s: run_latency_local(s, "pg"),
    "latency-sqlite-local": lambda s: run_latency_local(s, "sqlite"),
}


def run(s: Settings, only: list[str] | None, log: Callable[[str], None]) -> list[Result]:
    names = only or list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown configuration(s) {unknown}; known: {list(CONFIGS)}")
    own_tmp = not s.tmp
    if own_tmp:
        s.tmp = tempfile.mkdtemp(prefix="swfbench-")
    results: list[Result] = []
    try:
        for name in names:
            log(f"-- {name} ...")
            t = time.perf_counter()
            try:
                r = CONFIGS[name](s)
            except Exception as exc:  # a failed configuration is reported, not fatal
                msg = str(exc).strip().splitlines()
                r = Result(name, "?", "?", 0, 0, 0.0, error=msg[-1] if msg else repr(exc))
            log(f"   {name}: {_short(r)} ({time.perf_counter() - t:.1f} s wall)")
            results.append(r)
    finally:
        if own_tmp:
            shutil.rmtree(s.tmp, ignore_errors=True)
    return results


def _short(r: Result) -> str:
    if r.error:
        return f"ERROR {r.error}"
    if r.system == "latency":
        return f"p50 {r.extra['p50_ms']:.2f} ms, p99 {r.extra['p99_ms']:.2f} ms"
    return f"{r.steps_per_s:.0f} steps/s, {r.wf_per_s:.0f} wf/s"


# -- the table ----------------------------------------------------------------------------
def _goal(r: Result, raw: Result | None) -> str:
    """The target column: the performance issue's ratio for this row, and whether it is
    met (bench/targets.py has the whole list, printed under the table)."""
    for _, store, procs, e2e, goal in targets.RAW_RATIOS:
        if (store, "e2e" in r.name, procs == 1) == (r.store, e2e, r.procs == 1):
            if r.system != "swf" or raw is None or raw.steps_per_s <= 0:
                return ""
            met = "met" if r.steps_per_s / raw.steps_per_s >= goal else "NOT met"
            return f"raw>={goal:.2f} {met}"
    return ""


def table(results: list[Result], s: Settings) -> str:
    def find(store: str, system: str, procs: int, e2e: bool = False) -> Result | None:
        for r in results:
            same = (r.store, r.system, r.procs, r.error) == (store, system, procs, None)
            if same and ("e2e" in r.name) == e2e:
                return r
        return None

    head = (
        f"{'configuration':<34} {'steps/s':>8} {'wf/s':>7} {'vs raw':>7} {'vs DBOS':>8}"
        f"  {'target':<18} {'cpu ms/step':>12} {'busy':>5}  notes"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        if r.error:
            lines.append(f"{r.name:<34} ERROR: {r.error}")
            continue
        if r.system == "latency":
            e = r.extra
            tgt = ""
            if r.store == "pg" and "same process" not in r.name:
                tgt = f"p99<=5ms {targets.latency([r]).word}"
            lines.append(
                f"{r.name:<34} p50 {e['p50_ms']:.2f} ms, p90 {e['p90_ms']:.2f} ms, "
                f"p99 {e['p99_ms']:.2f} ms, max {e['max_ms']:.2f} ms "
                f"(n={e['samples']}; start() call p50 {e['start_call_p50_ms']:.2f} ms)  {tgt}"
            )
            continue
        raw = find(r.store, "raw", r.procs)
        dbos = find(r.store, "dbos", 1)
        vs_raw = f"{r.steps_per_s / raw.steps_per_s:.2f}" if raw and r.system != "raw" else ""
        vs_dbos = f"{r.steps_per_s / dbos.steps_per_s:.1f}x" if dbos and r.system != "dbos" else ""
        tgt = _goal(r, raw)
        note = r.note
        if (r.system == "swf" and "e2e" in r.name) or r.system == "swf-api":
            same = find(r.store, "raw", r.procs, e2e=True)
            if same is not None and same.steps_per_s > 0:
                note += f"; vs raw start+run {r.steps_per_s / same.steps_per_s:.2f}"
        steps = r.workflows * STEPS
        cpu = ""
        if "client_cpu" in r.extra:
            cpu = f"{1000 * r.extra['client_cpu'] / steps:.2f}"
            if r.store == "pg":
                pg = r.extra["pg_cpu"]
                cpu += f"+{1000 * pg / steps:.2f}" if pg > 0 else "+?"
        busy = f"{100 * r.extra['busy']:.0f}%" if "busy" in r.extra else ""
        lines.append(
            f"{r.name:<34} {r.steps_per_s:>8.0f} {r.wf_per_s:>7.0f} {vs_raw:>7} {vs_dbos:>8}"
            f"  {tgt:<18} {cpu:>12} {busy:>5}  {note}"
        )
    lines.append("")
    lines.append(
        f"N={s.n} workflows x {STEPS} no-op steps per configuration; {s.procs} procs for 'Np'; "
        f"cpus={os.cpu_count()}. vs raw: same store and process count. "
        "vs DBOS: DBOS 1p on the same store. vs raw start+run: the raw e2e row, which "
        "inserts each instance before its three steps.\ncpu ms/step: client processes (+ postgres "
        "server processes) CPU per step; busy: whole-machine CPU use during the timed run, "
        "other tenants included."
    )
    lines.append("")
    lines.append(
        targets.render("The performance issue's targets, this run:", targets.core_verdicts(results))
    )
    return "\n".join(lines)


def dump_json(results: list[Result], path: str) -> None:
    rows = []
    for r in results:
        d = asdict(r)
        d["steps_per_s"] = r.steps_per_s
        d["wf_per_s"] = r.wf_per_s
        rows.append(d)
    with open(path, "w") as fh:
        json.dump(rows, fh, indent=2)
