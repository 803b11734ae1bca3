"""What a workflow costs, statement by statement: ``python -m bench statements``.

One runner process on a fresh store, N three-step workflows, either pre-created or
started by ``Client.start`` from the main thread while the runner works (``--e2e``).
The store's named queries and decisions are wrapped with counters: per workflow, how
many of each ran, and on PostgreSQL the server CPU each took (the backend's utime +
stime from ``/proc``, in clock ticks: read the per-call figure as an average over many
calls). Also the claims that came back empty, the wake-ups (``nudge``) and the sleeps.
Nothing here asserts a timing.
"""

from __future__ import annotations

import collections
import logging
import tempfile
import threading
import time
from typing import Any

from . import core


def _backend_cpu(conn: Any) -> float:
    """CPU seconds so far of the server process behind ``conn`` (SQLite: none, 0)."""
    pid = getattr(getattr(conn, "info", None), "backend_pid", None)
    return 0.0 if pid is None else core._pid_cpu(pid)


class _Counted:
    """Counters around one store object's primitives (its own attributes, replaced)."""

    def __init__(self, store: Any) -> None:
        self.calls: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
        self.events: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        run, decide, claim = store._run, store._run_decision, store.claim
        wakeup = store._wakeup
        nudge, wait = wakeup.nudge, wakeup.wait

        def timed(name: str, conn: Any, call: Any) -> Any:
            before = _backend_cpu(conn)
            result = call()
            used = _backend_cpu(conn) - before
            with self._lock:
                self.calls[name][0] += 1
                self.calls[name][1] += used
            return result

        store._run = lambda conn, name, params: timed(name, conn, lambda: run(conn, name, params))
        store._run_decision = lambda conn, names, params: timed(
            "+".join(n.replace("apply_", "") for n in names),
            conn,
            lambda: decide(conn, names, params),
        )

        fused = store._finish_then_claim  # PostgreSQL: a finish and a claim, one statement

        def counted_fused(conn: Any, names: Any, params: Any) -> Any:
            name = "+".join(n.replace("apply_", "") for n in names) + "+claim"
            done, claimed = timed(name, conn, lambda: fused(conn, names, params))
            if done is not None and claimed is not None:
                got = "got work" if claimed else "empty"
                self._count(f"claim in a finish, {got}")
            return done, claimed

        store._finish_then_claim = counted_fused

        def counted_claim(**kw: Any) -> Any:
            got = claim(**kw)
            self._count("claim, empty" if not got else "claim, got work")
            return got

        def counted_nudge(topics: Any = ()) -> None:
            self._count("nudge (to a sleeper)" if wakeup.sleeping else "nudge (remembered)")
            nudge(topics)

        def counted_wait(timeout: float, types: Any = (), claimant: Any = None) -> bool:
            woken = wait(timeout, types, claimant)
            self._count("sleep ended by a wake-up" if woken else "sleep ran out")
            return bool(woken)

        store.claim = counted_claim
        if hasattr(store, "_send_continues"):  # PostgreSQL's group commit (stores/_pggroup.py)
            self._count_groups(timed)
        if hasattr(store, "_one"):  # PostgreSQL's reads by text (dag_snapshot): calls only
            self._count_reads(store)
        wakeup.nudge, wakeup.wait = counted_nudge, counted_wait
        keep = wakeup.keep

        def counted_keep(sleeper: Any, type_: str, *, made: bool = True, claim: Any = None) -> None:
            keep(sleeper, type_, made=made, claim=claim)
            self._count("start leased in its process" if claim else "start kept in its process")

        wakeup.keep = counted_keep

    def _count_groups(self, timed: Any) -> None:
        """Count the statements that carry several decisions: their module's ``execute``,
        wrapped (one store object in a runner process), and the decisions each carried."""
        from statemachine_wf.stores import _pggroup as group

        names = {
            group._joined(group.CONTINUES): "group: continues",
            group._then_claim(group.FINISHES): "group: finishes+claim",
            group._joined(group.DAG_COMMITS): "group: DAG node commits",
        }
        execute = getattr(group.execute, "__wrapped__", group.execute)

        def counted(conn: Any, text: str, params: Any) -> Any:
            name = names.get(text)
            if name is None:
                return execute(conn, text, params)
            with self._lock:
                self.events[f"{name}, decisions carried"] += len(params["ids"])
            return timed(name, conn, lambda: execute(conn, text, params))

        counted.__wrapped__ = execute  # type: ignore[attr-defined]
        group.execute = counted

    def _count_reads(self, store: Any) -> None:
        """Count the named queries PostgreSQL runs by their text (``_one``, ``_all``: the
        DAG snapshot among them), calls only: they take no connection argument."""
        from statemachine_wf.stores._pgconn import Q

        names = {text: name for name, text in Q.items()}

        def counting(call: Any) -> Any:
            def counted(query: str, params: Any) -> Any:
                name = names.get(query)
                if name is not None:
                    with self._lock:
                        self.calls[name][0] += 1
                return call(query, params)

            return counted

        store._one, store._all = counting(store._one), counting(store._all)

    def _count(self, what: str) -> None:
        with self._lock:
            self.events[what] += 1

    def summary(self) -> dict[str, list[float]]:
        """Each statement's [calls, server CPU seconds] and each event's [times, 0.0]."""
        with self._lock:
            out = {name: [calls, cpu] for name, (calls, cpu) in self.calls.items()}
            out.update({what: [times, 0.0] for what, times in self.events.items()})
            return out


def run(store_kind: str, n: int, *, e2e: bool, concurrency: int, dag: str = "") -> str:
    """``dag``: N pre-created DAG instances of that shape (bench/dag.py), per node."""
    from statemachine_wf.client.machine import Client
    from statemachine_wf.runtime.runner import Runner, RunnerOptions

    from . import dag as shapes
    from .workload import ThreeSteps

    s = core.Settings(n=n)
    s.tmp = tempfile.mkdtemp(prefix="swfbench-stmt-")
    spec = core._spec(s, store_kind, f"{store_kind}_statements")
    spec["concurrency"] = concurrency
    core.fresh_store(spec)
    try:
        if dag:
            # Created before the runner registers the type: the client says so per start.
            logging.getLogger("statemachine_wf.client").setLevel(logging.ERROR)
            shapes.precreate(spec, dag, n)
        elif not e2e:
            core.precreate(spec, n)
        store = core.open_store(spec)
        store.migrate()
        core.warm_pool(store, concurrency + 2)
        counted = _Counted(store)
        runner = Runner(
            store,
            [] if dag else [ThreeSteps],
            dags=shapes.registry if dag else None,
            options=RunnerOptions(concurrency=concurrency),
        )
        with core.watcher(spec) as count:
            t0 = time.perf_counter()
            runner.start()
            if e2e:
                client = Client(store)
                for i in range(n):
                    client.start(ThreeSteps, {"n": i})
            while count()[0] < n:
                time.sleep(0.005)
            elapsed = time.perf_counter() - t0
        runner.stop(timeout=30)
        store.close()
    finally:
        core.drop_store(spec)
    what = "end to end (start + run)" if e2e else "pre-created"
    if dag:
        units, unit = n * shapes.node_count(dag), "node"
        head = f"{store_kind}, {n} {dag} DAG instances, pre-created: {units} nodes"
    else:
        units, unit = n * 3, "workflow"
        head = f"{store_kind}, {what}: {n} workflows x 3 steps"
    lines = [
        f"{head}, {concurrency} workers, {units / elapsed:.0f} {'nodes' if dag else 'steps'}/s",
        f"{'statement':<44} {'per ' + unit:>12} {'server ms/call':>15}",
    ]
    per = units if dag else n
    for name, (calls, cpu) in sorted(counted.calls.items(), key=lambda kv: -kv[1][0]):
        server = f"{1000 * cpu / calls:.3f}" if store_kind == "pg" else "-"
        lines.append(f"{name:<44} {calls / per:>12.2f} {server:>15}")
    for what_, times in sorted(counted.events.items()):
        lines.append(f"{what_:<44} {times / per:>12.2f}")
    return "\n".join(lines)
