"""The performance issue's targets, judged from the rows of one run.

``python -m bench core`` and ``python -m bench dag`` print these lines under their tables,
so a run says by itself which of the issue's targets it met (the table's old column judged
steps/s against absolute figures of an earlier issue, which the issue now open replaced
with ratios against raw SQL measured in the same run). ``bench signals`` judges the timer
lateness the same way. Nothing here asserts anything: a verdict is printed, never a test.

Each target is read off rows the run has; a row it lacks (``--only`` left it out, or it
failed) gives "not measured", and the start latency is not judged when the machine's load
average was above 2, as the issue sets its goal at a load of 2 or less.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

STEPS = 3
"""No-op steps per benchmark workflow (bench/workload.py's ThreeSteps)."""

# (what, store, process count of the row: 1, or None for the 'Np' row, end to end, goal)
RAW_RATIOS: tuple[tuple[str, str, int | None, bool, float], ...] = (
    ("PostgreSQL, 1 process, pre-created, vs raw", "pg", 1, False, 0.90),
    ("PostgreSQL, {n} processes, pre-created, vs raw", "pg", None, False, 0.85),
    ("PostgreSQL, 1 process, end to end, vs raw", "pg", 1, True, 0.70),
    ("PostgreSQL, {n} processes, end to end, vs raw", "pg", None, True, 0.70),
    ("SQLite, 1 process, vs raw", "sqlite", 1, False, 0.80),
    ("SQLite, {n} processes, vs raw", "sqlite", None, False, 0.80),
)
E2E_SAME = 0.70
"""The end-to-end goal, read against raw SQL that also inserts each instance (the same
writes as a start and its run): not the issue's own reading, printed beside it."""
CPU_RATIO = 1.5
"""CPU per step, runner + server, over the raw statement's: at most this."""
LATENCY_P99_MS = 5.0
"""Start to first step, p99, an idle runner on PostgreSQL: at most this..."""
LATENCY_LOAD = 2.0
"""...at a load average of at most this."""
DBOS_RATIO = 5.0
"""Steps/s over DBOS's on the same database: at least this."""
DAG_RATIO = 0.8
"""A DAG node's rate over a state-machine step's, same store and process count."""


@dataclass(frozen=True)
class Verdict:
    target: str
    measured: str
    met: bool | None  # None: not judged (a row missing, or the load too high)

    @property
    def word(self) -> str:
        return {True: "met", False: "NOT met", None: "not judged"}[self.met]

    def line(self) -> str:
        return f"  {self.target:<58} {self.measured:<24} {self.word}"


def render(title: str, verdicts: Sequence[Verdict]) -> str:
    return "\n".join([title, *(v.line() for v in verdicts)])


def _row(results: Sequence[Any], store: str, system: str, procs: int | None, e2e: bool) -> Any:
    """The run's row of ``system`` on ``store``: 1 process, or (None) the 'Np' one."""
    for r in results:
        if r.error or (r.store, r.system) != (store, system) or ("e2e" in r.name) != e2e:
            continue
        if (procs == 1) == (r.procs == 1):
            return r
    return None


def _cpu_per_step(r: Any) -> float | None:
    """Runner processes' plus their backends' CPU per step, ms; None if not measured."""
    if "client_cpu" not in r.extra or not r.extra.get("pg_cpu"):
        return None
    cpu: float = r.extra["client_cpu"] + r.extra["pg_cpu"]
    return 1000 * cpu / (r.workflows * STEPS)


def core_verdicts(results: Sequence[Any]) -> list[Verdict]:
    """The targets ``bench core`` measures, from its results (bench.core.Result)."""
    out: list[Verdict] = []
    for what, store, procs, e2e, goal in RAW_RATIOS:
        swf = _row(results, store, "swf", procs, e2e)
        raw = _row(results, store, "raw", procs, False)
        label = f"{what.format(n=swf.procs if swf else 'N')} >= {goal:.2f}"
        out.append(_rate_ratio(label, swf, raw, goal, "{:.2f}"))
    for procs in (1, None):
        # The same end-to-end rows against raw SQL doing the same writes: each instance
        # inserted (as a start) before its three steps. Printed beside the issue's own
        # reading above, which compares with the three steps alone.
        swf = _row(results, "pg", "swf", procs, True)
        raw = _row(results, "pg", "raw", procs, True)
        n = swf.procs if swf else "N"
        label = f"PostgreSQL, {n} process{'es' if n != 1 else ''}, e2e vs raw start+run"
        out.append(_rate_ratio(f"{label} >= {E2E_SAME:.2f}", swf, raw, E2E_SAME, "{:.2f}"))
    for procs in (1, None):
        swf = _row(results, "pg", "swf", procs, False)
        raw = _row(results, "pg", "raw", procs, False)
        cpu = (_cpu_per_step(swf), _cpu_per_step(raw)) if swf and raw else (None, None)
        n = swf.procs if swf else "N"
        label = f"PostgreSQL CPU per step vs raw, {n}p <= {CPU_RATIO:.1f}x"
        if cpu[0] is None or not cpu[1]:
            out.append(Verdict(label, "not measured", None))
            continue
        ratio = cpu[0] / cpu[1]
        out.append(
            Verdict(label, f"{ratio:.1f}x ({cpu[0]:.2f} / {cpu[1]:.2f} ms)", ratio <= CPU_RATIO)
        )
    out.append(latency(results))
    dbos = _row(results, "pg", "dbos", 1, True)
    for e2e in (False, True):
        swf = _row(results, "pg", "swf", 1, e2e)
        kind = "end to end" if e2e else "pre-created"
        label = f"PostgreSQL 1p {kind} vs DBOS >= {DBOS_RATIO:.0f}x"
        out.append(_rate_ratio(label, swf, dbos, DBOS_RATIO, "{:.1f}x"))
    return out


def _rate_ratio(label: str, row: Any, base: Any, goal: float, shown: str) -> Verdict:
    """``row``'s steps/s over ``base``'s, at least ``goal``; not measured without both."""
    if row is None or base is None or base.steps_per_s <= 0:
        return Verdict(label, "not measured", None)
    ratio = row.steps_per_s / base.steps_per_s
    return Verdict(label, shown.format(ratio), ratio >= goal)


def latency(results: Sequence[Any]) -> Verdict:
    label = f"PostgreSQL start -> first step p99 <= {LATENCY_P99_MS:.0f} ms"
    for r in results:
        if r.error or r.system != "latency" or r.store != "pg" or "same process" in r.name:
            continue
        p99, load = r.extra["p99_ms"], r.extra.get("load")
        measured = f"{p99:.2f} ms" + ("" if load is None else f" (load {load:.2f})")
        if load is not None and load > LATENCY_LOAD:
            return Verdict(label, measured, None)
        return Verdict(label, measured, p99 <= LATENCY_P99_MS)
    return Verdict(label, "not measured", None)


def dag_verdicts(rows: Sequence[Any]) -> list[Verdict]:
    """A DAG shape's rate over the state machine's, per store and process count
    (bench.dag.Row: store, procs, shape, rate, error); a chain's also over the steps in a
    row's (the state machine of the chain's shape), where the run has them."""
    steps = {(r.store, r.procs): r.rate for r in rows if r.shape == "steps" and not r.error}
    in_a_row = {(r.store, r.procs): r.rate for r in rows if r.shape == "row" and not r.error}
    out = []
    for r in rows:
        if r.shape in ("steps", "row", "slowfan"):  # slowfan: seconds of sleeping nodes
            continue
        label = f"DAG {r.shape} {r.store} {r.procs}p vs a step >= {DAG_RATIO:.2f}"
        base = steps.get((r.store, r.procs))
        if r.error or not base:
            out.append(Verdict(label, "not measured", None))
        else:
            out.append(Verdict(label, f"{r.rate / base:.2f}", r.rate / base >= DAG_RATIO))
        row = in_a_row.get((r.store, r.procs))
        if r.shape == "chain" and row and not r.error:
            label = f"DAG chain {r.store} {r.procs}p vs a step in a row >= {DAG_RATIO:.2f}"
            out.append(Verdict(label, f"{r.rate / row:.2f}", r.rate / row >= DAG_RATIO))
    return out
