"""Event types of the append-only log, and the records the stores hand back.

Step events carry ``node`` (the state or DAG node) and ``attempt``; the store's unique
index on ``(instance_id, node, event_type, attempt)`` over :data:`ONCE_PER_ATTEMPT`
makes a duplicate write of those a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    """The universal statuses of an instance."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STALLED = "STALLED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in (Status.COMPLETED, Status.FAILED, Status.CANCELLED)


ACTIVE_STATUSES = (Status.PENDING, Status.RUNNING, Status.STALLED)


class Ev(StrEnum):
    """Event types."""

    CREATED = "WORKFLOW_CREATED"
    STEP_STARTED = "STEP_STARTED"
    STEP_RELEASED = "STEP_RELEASED"
    """An attempt whose STEP_STARTED a claim wrote, handed back before any worker ran it
    (a runner stopping, a start leased to a busy runner's process): not in doubt."""
    PROGRESS_SET = "PROGRESS_SET"
    STEP_COMPLETED = "STEP_COMPLETED"
    STEP_FAILED = "STEP_FAILED"
    STEP_WAITING = "STEP_WAITING"
    RECONCILED = "RECONCILED"
    RECONCILE_FAILED = "RECONCILE_FAILED"
    COMPLETED = "WORKFLOW_COMPLETED"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    CANCELLED = "WORKFLOW_CANCELLED"
    RESUMED = "WORKFLOW_RESUMED"
    RETRIED = "WORKFLOW_RETRIED"
    QUARANTINED = "QUARANTINED"
    # Signals and timers (waits.py): a wait is a STEP_WAITING whose payload has a token.
    WAIT_TOKEN = "WAIT_TOKEN"
    SIGNAL_RECEIVED = "SIGNAL_RECEIVED"
    TIMER_FIRED = "TIMER_FIRED"
    STALE_SIGNAL_DROPPED = "STALE_SIGNAL_DROPPED"
    SIGNAL_REJECTED = "SIGNAL_REJECTED"
    # Audit only (the fold ignores them): a long claim's throttled heartbeat, a dead
    # letter written for this instance, a soft delete.
    HEARTBEAT = "HEARTBEAT"
    DEAD_LETTERED = "DEAD_LETTERED"
    DELETED = "WORKFLOW_DELETED"
    # DAG instances (kind='dag'): ``node`` is the node id; ``attempt`` is the node's run
    # (its dispatch number) for DISPATCHED/COMPLETED/FAILED, and its try for STARTED.
    NODE_DISPATCHED = "NODE_DISPATCHED"
    NODE_STARTED = "NODE_STARTED"
    NODE_COMPLETED = "NODE_COMPLETED"
    NODE_RETRYING = "NODE_RETRYING"
    NODE_WAITING = "NODE_WAITING"
    """A sub-workflow node parked its task until its child instance ends."""
    NODE_FAILED = "NODE_FAILED"
    FAILED = "WORKFLOW_FAILED"


ONCE_PER_ATTEMPT = (Ev.STEP_STARTED, Ev.STEP_COMPLETED, Ev.STEP_FAILED)


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended."""

    event_type: Ev
    node: str | None = None
    attempt: int | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class EventRecord:
    """An event as stored."""

    seq: int
    instance_id: str
    event_type: str
    node: str | None
    attempt: int | None
    payload: dict[str, Any]
    error: dict[str, Any] | None
    worker: str | None
    created_at: float
