"""The store's own PostgreSQL statements replayed on one backend: ``python -m bench replay``.

``bench statements`` divides a whole run's backend CPU by its calls, and with eight
workers on two cores its per-call figures move 30-50% between runs. Here one connection
runs one statement at a time, so the backend's CPU (utime + stime from ``/proc``) over a
few thousand calls is the statement's own cost: what a change to its SQL or to the schema
saves, measured in the same run as the raw SQL write of ``bench core``.

The statements are the store's as it sends them: a runner on a scratch schema runs two
workflows and the first continue and the first finish-and-claim it sends are kept, text
and parameters. Each round then replays, on a fresh schema of ``--n`` pre-created
workflows:

* ``continue``: the same instance moved on again and again (its version and the events'
  attempt numbers renewed each call, so the CAS holds and the once-per-attempt index
  takes each event);
* ``finish+claim``: each call ends the instance the previous one claimed and claims the
  next pre-created one (the claim's pick, lease, version bump and STEP_STARTED included);
* ``raw``: ``bench core``'s raw statement (the instance, two events, the task), chained
  on one instance the same way.

Printed: each statement's median over the rounds and every round's figure, in µs of
server CPU a call. Nothing here asserts a timing.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from . import core

Call = Callable[[int], None]


def _capture(s: core.Settings) -> dict[str, tuple[str, dict[str, Any]]]:
    """A continue and a finish-and-claim as the store sends them (text, parameters)."""
    from statemachine_wf.runtime.runner import Runner, RunnerOptions
    from statemachine_wf.stores import _pgconn

    from .workload import ThreeSteps

    spec = core._spec(s, "pg", "replay_capture")
    core.fresh_store(spec)
    core.precreate(spec, 2)
    store = core.open_store(spec)
    store.migrate()
    sent: list[tuple[str, dict[str, Any]]] = []
    execute = _pgconn.execute

    def recording(conn: Any, query: str, params: dict[str, Any]) -> Any:
        sent.append((query, dict(params)))
        return execute(conn, query, params)

    _pgconn.execute = recording  # type: ignore[assignment]
    try:
        runner = Runner(store, [ThreeSteps], options=RunnerOptions(concurrency=1))
        with core.watcher(spec) as count:
            runner.start()
            while count()[0] < 2:
                time.sleep(0.01)
        runner.stop(timeout=30)
    finally:
        _pgconn.execute = execute
        store.close()
        core.drop_store(spec)
    decisions = [(q, p) for q, p in sent if q.startswith("WITH inst AS")]
    return {
        "continue": next((q, p) for q, p in decisions if p.get("status") == "RUNNING"),
        "finish+claim": next((q, p) for q, p in decisions if p.get("status") == "COMPLETED"),
    }


def _round(
    s: core.Settings, captured: dict[str, tuple[str, dict[str, Any]]], calls: int
) -> dict[str, float]:
    import psycopg
    from psycopg.rows import dict_row
    from psycopg.types.json import Jsonb

    from statemachine_wf.stores import _pgconn

    from .workload import ThreeSteps

    spec = core._spec(s, "pg", "replay")
    core.fresh_store(spec)
    core.precreate(spec, calls + 60)
    store = core.open_store(spec)
    store.migrate()
    out: dict[str, float] = {}
    try:
        options = f"-c search_path={spec['schema']} -c enable_seqscan=off"
        with psycopg.connect(
            spec["dsn"], autocommit=True, row_factory=dict_row, options=options
        ) as conn:
            backend = conn.info.backend_pid

            def store_call(name: str) -> Call:
                text, base = captured[name]
                query, names = _pgconn.positional(text)
                [claim] = store.claim(
                    worker=base["worker"], types=[ThreeSteps.workflow_type], lease=30.0
                )
                at = {"id": claim.instance.id, "version": claim.instance.version}

                def call(i: int) -> None:
                    p = {**base, **at}
                    if name == "continue":
                        p["events"] = Jsonb(_continue_events(i))
                    rows = (
                        psycopg.RawCursor(conn)
                        .execute(query, [p[n] for n in names], prepare=True)
                        .fetchall()
                    )
                    if name == "continue":
                        at["version"] = rows[0]["version"]
                        return
                    claimed = rows[0]["instance"]
                    if claimed is None:
                        raise RuntimeError("the finish-and-claim claimed nothing")
                    at.update(id=str(claimed["id"]), version=int(claimed["version"]))

                return call

            def raw_call() -> Call:
                row = conn.execute(
                    "SELECT id, version FROM wf_instances WHERE status = 'PENDING' LIMIT 1"
                ).fetchone()
                assert row is not None
                at = {"id": row["id"], "version": row["version"]}

                def call(i: int) -> None:
                    params = {
                        **at,
                        "node": f"n{i}",
                        "next": f"n{i + 1}",
                        "attempts": Jsonb({"a": 1}),
                        "payload": Jsonb({"progress": {}, "to": "x"}),
                        "worker": "raw",
                        "lease": i % 3 == 0,
                    }
                    version = conn.execute(core.RAW_PG, params, prepare=True).fetchone()
                    assert version is not None
                    at["version"] = version["version"]

                return call

            # Made one after the other: each takes its instance when its turn comes (the
            # finish-and-claims claim pre-created instances as they go).
            makers: dict[str, Callable[[], Call]] = {
                "continue": lambda: store_call("continue"),
                "finish+claim": lambda: store_call("finish+claim"),
                "raw": raw_call,
            }
            for name, make in makers.items():
                call = make()
                for i in range(1, 21):  # prepared, and past the custom plans
                    call(i)
                c0 = core._pid_cpu(backend)
                for i in range(21, calls + 21):
                    call(i)
                out[name] = 1e6 * (core._pid_cpu(backend) - c0) / calls
    finally:
        store.close()
        core.drop_store(spec)
    return out


def _continue_events(attempt: int) -> list[dict[str, Any]]:
    return [
        {
            "node": "a",
            "event_type": "STEP_COMPLETED",
            "attempt": attempt,
            "payload": {"progress": {}, "to": "b"},
            "error": None,
        },
        {
            "node": "b",
            "event_type": "STEP_STARTED",
            "attempt": attempt,
            "payload": {},
            "error": None,
        },
    ]


def main(n: int, rounds: int, dsn: str = "") -> str:
    s = core.Settings(n=n)
    if dsn:
        s.dsn = dsn
    s.tmp = tempfile.mkdtemp(prefix="swfbench-replay-")
    captured = _capture(s)
    figures: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, us in _round(s, captured, n).items():
            figures.setdefault(name, []).append(us)
    lines = [f"one backend, {n} calls a statement a round, {rounds} rounds (µs server CPU a call)"]
    for name, values in figures.items():
        each = ", ".join(f"{v:.0f}" for v in values)
        lines.append(f"{name:14} median {statistics.median(values):6.0f}   rounds: {each}")
    return "\n".join(lines)
