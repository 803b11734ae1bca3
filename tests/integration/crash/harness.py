"""Helpers of the crash tests: where the store is, runner child processes, the checks.

A :class:`Target` names one store (an SQLite file or a Postgres schema) and its ledger so
that the test and its child processes open the same ones. :class:`Children` starts
``worker_main.py`` processes and kills whatever is still alive when the test ends.
:func:`assert_durable` is the whole durability verdict on a set of instances.
"""

from __future__ import annotations

import io
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from statemachine_wf.client.machine import Client
from statemachine_wf.core.store import Store
from statemachine_wf.definition.events import Ev, Status

from .workflows import KEY_FIELD, STEPS, Ledger, open_ledger

WORKER = Path(__file__).with_name("worker_main.py")
REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Target:
    """One store and its ledger, as the test and its children open them."""

    kind: str  # "sqlite" or "postgres"
    url: str
    schema: str | None
    ledger_spec: str
    log_dir: Path

    def open_store(self) -> Store:
        from statemachine_wf.stores import open_store

        options: dict[str, Any] = {} if self.schema is None else {"schema": self.schema}
        store = open_store(self.url, **options)
        store.migrate()
        return store

    def open_ledger(self) -> Ledger:
        return open_ledger(self.ledger_spec)

    def open_sql(self) -> Any:
        """A psycopg connection (autocommit) on the target's Postgres schema."""
        import psycopg

        return psycopg.connect(self.url, autocommit=True, options=f"-c search_path={self.schema}")

    def args(self) -> list[str]:
        out = ["--url", self.url, "--ledger", self.ledger_spec]
        if self.schema is not None:
            out += ["--schema", self.schema]
        return out


def sql_scalar(sql: Any, query: str, *params: Any) -> Any:
    """The first column of the first row of ``query`` on the connection ``sql``."""
    row = sql.execute(query, params).fetchone()
    assert row is not None
    return row[0]


@dataclass(frozen=True)
class Opened:
    """What a PostgreSQL crash test reads with: the store, the ledger, a SQL connection on
    the test's schema, and ``scalar(query, *params)`` on that connection."""

    store: Store
    ledger: Ledger
    sql: Any
    scalar: Callable[..., Any]


@contextmanager
def opened(target: Target) -> Iterator[Opened]:
    """The target's store, ledger and SQL connection, closed on the way out."""
    store = target.open_store()
    ledger = target.open_ledger()
    sql = target.open_sql()
    try:
        yield Opened(store, ledger, sql, partial(sql_scalar, sql))
    finally:
        sql.close()
        ledger.close()
        store.close()


def poll_until(
    condition: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.05
) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class Children:
    """Runner child processes of one test; every one still alive is killed on exit."""

    def __init__(self, target: Target, script: Path = WORKER) -> None:
        self.target = target
        self.script = script
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def __enter__(self) -> Children:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc, _ in self.procs:
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()

    def spawn(
        self,
        worker_id: str,
        *,
        lease: float,
        concurrency: int = 2,
        kill: str | None = None,
        chaos: str | None = None,
        heartbeat_outage: float = 0.0,
        produce: int = 0,
        ready_timeout: float = 30.0,
    ) -> subprocess.Popen[bytes]:
        """Start a runner and return once it has opened its store."""
        log = self.target.log_dir / f"{worker_id}-{len(self.procs)}.log"
        cmd = [
            sys.executable,
            str(self.script),
            *self.target.args(),
            "--worker-id",
            worker_id,
            "--lease",
            str(lease),
            "--concurrency",
            str(concurrency),
        ]
        if kill:
            cmd += ["--kill", kill]
        if chaos:
            cmd += ["--chaos", chaos]
        if heartbeat_outage:
            cmd += ["--heartbeat-outage", str(heartbeat_outage)]
        if produce:
            cmd += ["--produce", str(produce)]
        with log.open("wb") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, cwd=REPO)
        self.procs.append((proc, log))
        assert proc.stdout is not None
        deadline = time.monotonic() + ready_timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or proc.poll() is not None:
                raise AssertionError(f"{worker_id} did not start:\n{self.log_tail(proc)}")
            ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.2))
            if ready:
                # PIPE with the default buffering: a BufferedReader (typeshed says IO[bytes]).
                line += cast(io.BufferedReader, proc.stdout).read1(4096)
        assert line.startswith(b"READY"), line
        return proc

    def log_tail(self, proc: subprocess.Popen[bytes], lines: int = 40) -> str:
        for p, path in self.procs:
            if p is proc:
                text = path.read_text(errors="replace").splitlines()
                return "\n".join(text[-lines:])
        return ""

    def wait_exit(self, proc: subprocess.Popen[bytes], timeout: float, what: str) -> int:
        """The child's exit status; fail if it is still running after ``timeout`` s."""
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{what}: child still running after {timeout} s\n{self.log_tail(proc)}"
            ) from None

    def terminate(self, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
        """SIGTERM: a runner stops gracefully and exits 0 within ``timeout`` s."""
        proc.send_signal(signal.SIGTERM)
        code = self.wait_exit(proc, timeout, "graceful stop")
        assert code == 0, f"exit status {code} after SIGTERM\n{self.log_tail(proc)}"


def wait_completed(scalar: Callable[..., Any], n: int, *, what: str) -> None:
    """Poll the target's database (``scalar``: see :class:`Opened`) until ``n`` instances
    are COMPLETED; fail naming ``what`` after 120 s."""
    poll_until(
        lambda: scalar("SELECT count(*) FROM wf_instances WHERE status = 'COMPLETED'") == n,
        timeout=120,
        what=what,
        interval=0.25,
    )


def count_completed(store: Store, ids: list[str]) -> int:
    done = 0
    for instance_id in ids:
        record = store.get(instance_id)
        done += record is not None and record.status == Status.COMPLETED
    return done


def assert_durable(store: Store, ledger: Ledger, ids: list[str]) -> None:
    """Every instance completed exactly once per step, with its log and the ledger intact.

    * status COMPLETED, and the row equals the fold of the log (``verify() == {}``);
    * the log has one WORKFLOW_CREATED first, one STEP_COMPLETED per step in order (so no
      step completed twice and none was skipped), one WORKFLOW_COMPLETED last;
    * the ledger holds exactly one side effect per (instance, step), recorded under the
      identity the instance saved in its progress, and nothing for unknown instances.
    """
    client = Client(store)
    problems: list[str] = []
    for instance_id in ids:
        record = client.get(instance_id)
        if record.status != Status.COMPLETED:
            problems.append(f"{instance_id}: {record.status} at {record.step}")
        diff = client.verify(instance_id)
        if diff:
            problems.append(f"{instance_id}: row differs from the fold of its log: {diff}")
        events = store.events(instance_id)
        types = [e.event_type for e in events]
        if not types or types[0] != Ev.CREATED or types.count(Ev.CREATED) != 1:
            problems.append(f"{instance_id}: log does not start with one WORKFLOW_CREATED")
        if not types or types[-1] != Ev.COMPLETED or types.count(Ev.COMPLETED) != 1:
            problems.append(f"{instance_id}: log does not end with one WORKFLOW_COMPLETED")
        completed = [e.node for e in events if e.event_type == Ev.STEP_COMPLETED]
        if completed != list(STEPS):
            problems.append(f"{instance_id}: STEP_COMPLETED for {completed}, want {STEPS}")
        for step in STEPS:
            if record.progress.get(KEY_FIELD[step]) is None:
                problems.append(f"{instance_id}: no saved identity for {step}")

    effects = ledger.effects()
    per_pair = Counter((instance_id, step) for _, instance_id, step in effects)
    keys = {(instance_id, step): key for key, instance_id, step in effects}
    for instance_id in ids:
        progress = store.get(instance_id).progress  # type: ignore[union-attr]
        for step in STEPS:
            n = per_pair.get((instance_id, step), 0)
            if n != 1:
                problems.append(f"{instance_id}/{step}: {n} side effects in the ledger, want 1")
            elif keys[(instance_id, step)] != progress.get(KEY_FIELD[step]):
                problems.append(f"{instance_id}/{step}: side effect not under the saved key")
    per_step = Counter(step for _, _, step in effects)
    if dict(per_step) != {s: len(ids) for s in STEPS}:
        problems.append(f"ledger counters {dict(per_step)}, want {len(ids)} per step")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:20])
