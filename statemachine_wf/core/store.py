"""The ``Store`` port: what the runtime needs from a database, and the records it returns.

Two implementations ship in :mod:`statemachine_wf.stores` (SQLite and PostgreSQL) and
pass the same contract suite. Every scheduling write goes through :meth:`Store.apply`,
which appends a :class:`~statemachine_wf.core.decide.Decision`'s events, writes the projection
they produce and changes the task, all in one commit gated by the instance's version.

:class:`Store` is the union of the port's roles (instance log, task queue, locks, signals,
inbox, DAG runs, live updates), defined with their consistency rules in
:mod:`statemachine_wf.core.ports`.
"""

from __future__ import annotations

from typing import Protocol

from .ports import DagRuns, Inbox, InstanceLog, Lifecycle, LiveUpdates, Locks, Signals, TaskQueue
from .records import (  # re-exported: the records belong to the port
    KIND_NAMES,
    RESOLVE_ON_CLAIM,
    Claim,
    Claimant,
    Commit,
    DagApplied,
    DagCommit,
    DagSnapshot,
    InstanceRecord,
    LockRecord,
    NewDagInstance,
    NewInstance,
    TaskRecord,
    TypeKind,
)

__all__ = [
    "KIND_NAMES",
    "RESOLVE_ON_CLAIM",
    "Claim",
    "Claimant",
    "Commit",
    "DagApplied",
    "DagCommit",
    "DagSnapshot",
    "InstanceRecord",
    "LockRecord",
    "NewDagInstance",
    "NewInstance",
    "Store",
    "TaskRecord",
    "TypeKind",
    "like_prefix",
    "matches_prefix",
]


class Store(
    Lifecycle, InstanceLog, TaskQueue, Locks, Signals, Inbox, DagRuns, LiveUpdates, Protocol
):
    """Persistence of instances, the log and the task queue: every role of
    :mod:`statemachine_wf.core.ports` in one object (both shipped stores are one)."""


def matches_prefix(type_name: str, prefix: str) -> bool:
    """Type-prefix routing: ``billing.`` or ``billing.%`` match ``billing.invoice.v1``."""
    return type_name.startswith(prefix[:-1] if prefix.endswith("%") else prefix)


def like_prefix(prefix: str) -> str:
    """A type prefix as a LIKE pattern: matched literally, except a trailing ``%``.

    ``billing.`` and ``billing.%`` both mean "types starting with billing."; a ``%`` or
    ``_`` anywhere else is a literal character.
    """
    literal = prefix[:-1] if prefix.endswith("%") else prefix
    escaped = literal.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"
