"""The inbox benchmark: enqueue rates and claim throughput on a loaded table.

``python -m bench inbox [--quick]`` measures, on PostgreSQL, in one run:

* **enqueue, single** -- one run recorded per call: ``Client.start`` beside the same
  statement sent by hand (the store's own ``create`` CTE: instance, WORKFLOW_CREATED and
  task in one round trip: the physical limit of that write) and Procrastinate's
  ``defer`` (one job row) on the same server;
* **enqueue, batched** -- ``Client.start_many`` (one statement per batch) beside a
  hand-written multi-row CTE doing the same three inserts and Procrastinate's
  ``batch_defer``;
* **claim throughput** -- one runner process drains K three-step instances from an
  otherwise empty table, then again with 100,000 more pending and 1,000,000 finished
  instances (two events each) in the tables (``--finished``/``--pending`` change those
  counts: ``--finished 5000000`` is a 10M-row ``wf_events``); the ratio is the cost of a
  big inbox. Each drain notes the CPU per step, the runner's and the whole server's.

Each case gets a fresh schema. Nothing here asserts a timing.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from statemachine_wf.definition.ids import new_instance_id
from statemachine_wf.definition.workflow import COMPLETED, Workflow, step
from statemachine_wf.runtime.context import StepContext

from .core import pg_dsn, proc_cpu


class InboxInput(BaseModel):
    n: int


class InboxProgress(BaseModel):
    pass


_done = 0
_done_lock = threading.Lock()
_target = threading.Event()
_want = 0


class Drained(Workflow[InboxInput, InboxProgress]):
    """Three no-op steps; the last one counts completions in this process."""

    workflow_type = "bench.inbox.v1"

    @step(initial=True, to="b")
    def a(self, ctx: StepContext[InboxInput, InboxProgress]) -> str:
        return "b"

    @step(to="c")
    def b(self, ctx: StepContext[InboxInput, InboxProgress]) -> str:
        return "c"

    @step(to=COMPLETED)
    def c(self, ctx: StepContext[InboxInput, InboxProgress]) -> None:
        global _done
        with _done_lock:
            _done += 1
            if _done >= _want:
                _target.set()


@dataclass
class Settings:
    single: int = 2000
    batched: int = 20000
    batch: int = 100
    drain: int = 3000
    pending: int = 100_000
    finished: int = 1_000_000
    concurrency: int = 8
    ids: str = "v7"  # the claim cases' instance ids: "v7" (new_instance_id) or "v4" (random)
    dsn: str = field(default_factory=pg_dsn)

    @classmethod
    def quick(cls) -> Settings:
        return cls(single=200, batched=2000, drain=300, pending=5000, finished=50_000)


@dataclass
class Row:
    case: str
    system: str
    count: int
    seconds: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0


# -- schemas ----------------------------------------------------------------------------
def _admin(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


def _fresh_schema(dsn: str, schema: str) -> None:
    from psycopg import sql

    with _admin(dsn) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))


def _drop_schema(dsn: str, schema: str) -> None:
    from psycopg import sql

    with _admin(dsn) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _store(dsn: str, schema: str, pool: int = 4) -> Any:
    from statemachine_wf.stores.postgres import PostgresStore

    store = PostgresStore(dsn, schema=schema, pool_size=pool)
    store.migrate()
    return store


def _conn(dsn: str, schema: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}")


# -- enqueue ------------------------------------------------------------------------------
_BATCH_SQL = """
WITH rows AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(inputs)s::jsonb[]) AS r(id, input)
), ins AS (
    INSERT INTO wf_instances (id, type, kind, status, step, input, priority)
    SELECT id, %(type)s, 'machine', 'PENDING', %(step)s, input, 100 FROM rows
    RETURNING id, type, input
), ev AS (
    INSERT INTO wf_events (instance_id, event_type, payload)
    SELECT id, 'WORKFLOW_CREATED', jsonb_build_object('input', input, 'initial', %(step)s)
    FROM ins
)
INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at)
SELECT id, '', %(step)s, 'machine', type, 100, now() FROM ins
"""


def raw_batch(conn: Any, ids: list[str], inputs: list[dict[str, Any]]) -> None:
    from psycopg.types.json import Jsonb

    conn.execute(
        _BATCH_SQL,
        {
            "ids": ids,
            "inputs": [Jsonb(i) for i in inputs],
            "type": Drained.workflow_type,
            "step": "a",
        },
    )


def enqueue_swf_single(s: Settings, schema: str) -> Row:
    from statemachine_wf.client.machine import Client

    store = _store(s.dsn, schema)
    client = Client(store)
    client.start(Drained, {"n": -1})  # warm the pool and the prepared statement
    t0 = time.perf_counter()
    for i in range(s.single):
        client.start(Drained, {"n": i})
    row = Row("enqueue single", "swf Client.start", s.single, time.perf_counter() - t0)
    store.close()
    return row


def enqueue_raw_single(s: Settings, schema: str) -> Row:
    from psycopg.types.json import Jsonb

    from statemachine_wf.stores._sql import queries

    store = _store(s.dsn, schema)
    store.close()
    q = queries("postgres")["create"]
    with _conn(s.dsn, schema) as conn:
        t0 = time.perf_counter()
        for i in range(s.single):
            data = {"n": i}
            conn.execute(
                q,
                {
                    "id": str(uuid.uuid4()),
                    "type": Drained.workflow_type,
                    "kind": "machine",
                    "step": "a",
                    "input": Jsonb(data),
                    "key": None,
                    "priority": 100,
                    "parent_id": None,
                    "parent_node": None,
                    "run_at": None,
                    "created": Jsonb({"input": data, "initial": "a"}),
                    "delay": 0.0,
                    "channel": f"swf_wake_{schema}",
                },
                prepare=True,
            )
        return Row("enqueue single", "raw SQL (same CTE)", s.single, time.perf_counter() - t0)


def enqueue_swf_batched(s: Settings, schema: str) -> Row:
    from statemachine_wf.client.machine import Client

    store = _store(s.dsn, schema)
    client = Client(store)
    client.start_many(Drained, [{"n": -1}])  # warm the pool and the statement
    t0 = time.perf_counter()
    for base in range(0, s.batched, s.batch):
        client.start_many(Drained, [{"n": base + i} for i in range(s.batch)])
    row = Row(
        "enqueue batched",
        f"swf Client.start_many x{s.batch}",
        s.batched,
        time.perf_counter() - t0,
    )
    store.close()
    return row


def enqueue_raw_batched(s: Settings, schema: str) -> Row:
    store = _store(s.dsn, schema)
    store.close()
    with _conn(s.dsn, schema) as conn:
        t0 = time.perf_counter()
        for base in range(0, s.batched, s.batch):
            ids = [str(uuid.uuid4()) for _ in range(s.batch)]
            raw_batch(conn, ids, [{"n": base + i} for i in range(s.batch)])
        seconds = time.perf_counter() - t0
    return Row("enqueue batched", f"raw SQL multi-row x{s.batch}", s.batched, seconds)


def _procrastinate_app(dsn: str, schema: str) -> Any:
    import procrastinate

    connector = procrastinate.SyncPsycopgConnector(
        conninfo=dsn, kwargs={"options": f"-c search_path={schema}"}, min_size=1, max_size=2
    )
    app = procrastinate.App(connector=connector)
    return app


def enqueue_procrastinate(s: Settings, schema: str, batched: bool) -> Row:
    app = _procrastinate_app(s.dsn, schema)
    with app.open():
        app.schema_manager.apply_schema()

        @app.task(name="bench.inbox", queue="bench")
        def job(n: int) -> None:  # pragma: no cover - never run here
            del n

        job.defer(n=-1)
        t0 = time.perf_counter()
        if batched:
            for base in range(0, s.batched, s.batch):
                job.batch_defer(*({"n": base + i} for i in range(s.batch)))
            return Row(
                "enqueue batched",
                f"procrastinate batch_defer x{s.batch}",
                s.batched,
                time.perf_counter() - t0,
            )
        for i in range(s.single):
            job.defer(n=i)
        return Row("enqueue single", "procrastinate defer", s.single, time.perf_counter() - t0)


# -- claim throughput ---------------------------------------------------------------------
_FINISHED_SQL = """
WITH ins AS (
    INSERT INTO wf_instances (id, type, kind, status, step, input, version, created_at,
                              updated_at)
    SELECT CASE WHEN %(v7)s THEN {v7} ELSE gen_random_uuid() END,
           'bench.inbox.v1', 'machine', 'COMPLETED', 'c',
           jsonb_build_object('n', g), 7, now() - interval '1 day', now() - interval '1 day'
    FROM generate_series(1, %(n)s) AS g
    RETURNING id
)
INSERT INTO wf_events (instance_id, event_type, payload)
SELECT id, e, '{}'::jsonb FROM ins, unnest(ARRAY['WORKFLOW_CREATED', 'WORKFLOW_COMPLETED']) e
"""


# A UUIDv7-like id a day old, in the order of g (bench data only: index order is what counts).
_V7_SQL = """encode(overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(
                        (extract(epoch FROM now() - interval '1 day') * 1000)::bigint + g)
                        FROM 3)
                    FROM 1 FOR 6), 'hex')::uuid"""
_FINISHED_SQL = _FINISHED_SQL.replace("{v7}", _V7_SQL)


def _ids(s: Settings, n: int) -> list[str]:
    """n new instance ids of the kind the run compares (--ids)."""
    if s.ids == "v4":
        return [str(uuid.uuid4()) for _ in range(n)]
    return [new_instance_id() for _ in range(n)]


def load_inbox(s: Settings, schema: str, log: Callable[[str], None]) -> None:
    """Fill the schema with ``finished`` COMPLETED instances and ``pending`` due ones."""
    with _conn(s.dsn, schema) as conn:
        t0 = time.perf_counter()
        conn.execute(_FINISHED_SQL, {"n": s.finished, "v7": s.ids == "v7"})
        log(f"  {s.finished:,} finished instances in {time.perf_counter() - t0:.0f} s")
        t0 = time.perf_counter()
        for base in range(0, s.pending, 1000):
            ids = _ids(s, 1000)
            raw_batch(conn, ids, [{"n": base + i} for i in range(1000)])
        # Steady state: without it autovacuum of the bulk load runs during the drain.
        conn.execute("VACUUM (ANALYZE)")
        took = time.perf_counter() - t0
        log(f"  {s.pending:,} pending instances in {took:.0f} s (+ VACUUM ANALYZE)")


_IO_SQL = """
SELECT coalesce(sum(idx_blks_read), 0) + coalesce(sum(heap_blks_read), 0),
       coalesce(sum(idx_blks_hit), 0) + coalesce(sum(heap_blks_hit), 0)
FROM pg_statio_user_tables WHERE schemaname = %(schema)s
"""


def _blocks(s: Settings, schema: str) -> tuple[int, int]:
    """The schema's buffer reads (not in shared_buffers) and hits so far, tables + indexes.
    Counted per schema, so unlike steps/s they barely depend on the neighbours."""
    time.sleep(1.2)  # backends flush their statistics at most once a second
    with _conn(s.dsn, schema) as conn:
        read, hit = conn.execute(_IO_SQL, {"schema": schema}).fetchone()
    return int(read), int(hit)


def drain(s: Settings, schema: str, label: str) -> Row:
    """Run one in-process runner until ``drain`` instances have completed."""
    global _done, _want
    from statemachine_wf.runtime.runner import Runner, RunnerOptions

    store = _store(s.dsn, schema, pool=s.concurrency + 4)
    with _conn(s.dsn, schema) as conn:
        ids = _ids(s, s.drain)
        for base in range(0, s.drain, 1000):
            chunk = ids[base : base + 1000]
            raw_batch(conn, chunk, [{"n": i} for i in range(len(chunk))])
    _done, _want = 0, s.drain
    _target.clear()
    read0, hit0 = _blocks(s, schema)
    cpu0, server0 = time.process_time(), proc_cpu("postgres")
    runner = Runner(store, [Drained], options=RunnerOptions(concurrency=s.concurrency, lease=30.0))
    thread = threading.Thread(
        target=runner.run, kwargs={"install_signal_handlers": False}, daemon=True
    )
    t0 = time.perf_counter()
    thread.start()
    finished = _target.wait(timeout=600)
    seconds = time.perf_counter() - t0
    cpu, server = time.process_time() - cpu0, proc_cpu("postgres") - server0
    runner.stop()
    thread.join(timeout=60)
    store.close()
    read1, hit1 = _blocks(s, schema)
    steps = s.drain * 3
    note = (
        f"blocks/step: {(read1 - read0) / steps:.2f} read, {(hit1 - hit0) / steps:.1f} hit; "
        f"cpu ms/step {1000 * cpu / steps:.2f} + {1000 * server / steps:.2f} (runner + server)"
        if finished
        else f"timed out with {_done} done"
    )
    return Row("claim throughput", label, s.drain * 3, seconds, note)


def run(s: Settings, only: list[str] | None, log: Callable[[str], None]) -> list[Row]:
    cases: list[tuple[str, Callable[[str], Row]]] = [
        ("swf-single", lambda sc: enqueue_swf_single(s, sc)),
        ("raw-single", lambda sc: enqueue_raw_single(s, sc)),
        ("procrastinate-single", lambda sc: enqueue_procrastinate(s, sc, batched=False)),
        ("swf-batched", lambda sc: enqueue_swf_batched(s, sc)),
        ("raw-batched", lambda sc: enqueue_raw_batched(s, sc)),
        ("procrastinate-batched", lambda sc: enqueue_procrastinate(s, sc, batched=True)),
        ("claim-empty", lambda sc: drain(s, sc, "steps/s, empty table")),
        ("claim-loaded", lambda sc: _loaded(s, sc, log)),
    ]
    rows: list[Row] = []
    for name, case in cases:
        if only and name not in only:
            continue
        schema = f"swfbench_inbox_{name.replace('-', '_')}"
        log(f"{name} ...")
        _fresh_schema(s.dsn, schema)
        try:
            rows.append(case(schema))
        except Exception as exc:  # a peer that fails is reported, the run goes on
            rows.append(Row(name, "error", 0, 0.0, f"{type(exc).__name__}: {exc}"))
        finally:
            _drop_schema(s.dsn, schema)
        log(f"  {rows[-1].rate:,.0f}/s {rows[-1].note}")
    return rows


def _loaded(s: Settings, schema: str, log: Callable[[str], None]) -> Row:
    store = _store(s.dsn, schema)
    store.close()
    load_inbox(s, schema, log)
    label = f"steps/s, {s.pending // 1000}k pending + {s.finished // 1000}k finished"
    return drain(s, schema, label)


def table(rows: list[Row]) -> str:
    out = [f"{'case':<18} {'system':<44} {'count':>7} {'seconds':>8} {'per s':>9}  ratio"]
    base: dict[str, float] = {}
    for r in rows:
        if r.system.startswith("raw") or r.system.endswith("empty table"):
            base[r.case] = r.rate
    for r in rows:
        limit = base.get(r.case, 0.0)
        ratio = f"{r.rate / limit:.2f}" if limit and r.rate else ""
        out.append(
            f"{r.case:<18} {r.system:<44} {r.count:>7} {r.seconds:>8.2f} {r.rate:>9,.0f}  "
            f"{ratio} {r.note}".rstrip()
        )
    out.append("ratio: against the raw SQL row of the same case (claim: against the empty table)")
    return "\n".join(out)
