"""How a runner behaves: :class:`RunnerOptions`, checked once when it is built.

Re-exported by :mod:`statemachine_wf.runtime.runner` and the package; kept apart because these
are plain validated settings (the CLI and the environment build them too), not runtime.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InputError


@dataclass(frozen=True, slots=True)
class RunnerOptions:
    """How a runner behaves.

    Attributes:
        concurrency: instances driven at once (one thread each).
        lease: seconds a claim lasts without a heartbeat; a dead runner's work is picked
            up again this long after it died.
        prefixes: type prefixes this runner takes (``billing.``); empty takes every
            hosted type.
        idle_poll: longest sleep with nothing due, a safety net for lost wake-ups (one
            worker sleeps until the next due time instead; see ``runtime.idle.Idle``).
        worker_id: a stable id lets a restarted runner take its own leases back at once.
        reconcile_on_start: run the start-up pass over RUNNING and STALLED instances.
        heartbeat_log_every: a claim held across heartbeats gets a HEARTBEAT event in the
            audit trail at most this often (seconds); ``None`` logs none.
        dag_types: the task types of DAG instances this runner takes, when it hosts DAGs
            (``Runner(..., dags=registry)``).
    """

    concurrency: int = 8
    lease: float = 30.0
    prefixes: tuple[str, ...] = ()
    idle_poll: float = 5.0
    worker_id: str | None = None
    reconcile_on_start: bool = True
    heartbeat_log_every: float | None = 60.0
    dag_types: tuple[str, ...] = ("swf.dag",)

    def __post_init__(self) -> None:
        """Every option is checked here, once, whoever builds it (code, CLI, env).

        Raises:
            InputError: naming the option, its value and what it must be.
        """
        _check_int("concurrency", self.concurrency, 1, MAX_CONCURRENCY)
        _check_seconds("lease", self.lease, MIN_LEASE, MAX_LEASE)
        _check_seconds("idle_poll", self.idle_poll, 0.001, MAX_LEASE)
        if self.heartbeat_log_every is not None:
            _check_seconds("heartbeat_log_every", self.heartbeat_log_every, 0.001, 1e9)
        # Stored as tuples past the frozen guard: a list the caller keeps (and changes
        # later) cannot change a running runner's options.
        object.__setattr__(self, "prefixes", _check_names("prefixes", self.prefixes))
        object.__setattr__(self, "dag_types", _check_names("dag_types", self.dag_types))
        # The id is written into events and log lines and shown by the CLI: a newline or
        # an escape sequence in it would garble (or forge) what an operator reads.
        if self.worker_id is not None and (
            not isinstance(self.worker_id, str)
            or not 0 < len(self.worker_id) <= 200
            or not self.worker_id.isprintable()
        ):
            raise InputError(
                f"worker_id must be a printable string of 1 to 200 characters, "
                f"got {self.worker_id!r}"
            )
        # Strictly a bool: the string "false" from a config file would be truthy.
        if not isinstance(self.reconcile_on_start, bool):
            raise InputError(
                f"reconcile_on_start must be True or False, got {self.reconcile_on_start!r}"
            )


MIN_LEASE = 0.1
"""Shortest lease (seconds): the heartbeat extends leases every lease/3, at most every 0.05 s."""
MAX_LEASE = 86_400.0
"""Longest lease (seconds): a dead runner's work waits this long at most."""
MAX_CONCURRENCY = 1024


def _check_int(name: str, value: Any, low: int, high: int) -> None:
    # bool is an int subclass: concurrency=True must not pass as 1.
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InputError(f"{name} must be a whole number in [{low}, {high}], got {value!r}")


def _check_seconds(name: str, value: Any, low: float, high: float) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not (ok and math.isfinite(value) and low <= value <= high):
        raise InputError(
            f"{name} must be a finite number of seconds in [{low:g}, {high:g}], got {value!r}"
        )


def _check_names(name: str, value: Any) -> tuple[str, ...]:
    # A str is a Sequence: prefixes="billing." would otherwise become the one-letter
    # prefixes "b", "i", ... and take unrelated types.
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InputError(f"{name} must be a sequence of strings, got {value!r}")
    for item in value:
        if not isinstance(item, str) or not item or not item.isprintable():
            raise InputError(f"{name} must hold non-empty printable strings, got {item!r}")
    return tuple(value)
