"""The audit trail in the durable inbox's lifecycle terms.

The log (``wf_events``) *is* the audit trail; this maps its event types onto the
lifecycle names of seeds 004 and 003 (created, leased, started, heartbeat, succeeded,
failed, retried, cancelled, waiting, signal received, timer fired, stale signal
dropped) so an operator or a dashboard can read a run in those terms. A claim is fused
with its intent: one STEP_STARTED (or NODE_STARTED) row records both the lease (its
``worker``) and the start, so it maps to ``leased+started``.

Every event type is classified here, either as a lifecycle event (:data:`LIFECYCLE`,
shown by :func:`lifecycle` and ``history --lifecycle``) or as step-level detail
(:data:`DETAIL`: a single step's completion, progress, a reserved token, a node's
dispatch); a unit test holds that a new :class:`~statemachine_wf.definition.events.Ev` member
cannot be left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from ..definition.events import Ev, EventRecord

LIFECYCLE: Mapping[Ev, str] = MappingProxyType(
    {
        Ev.CREATED: "created",
        Ev.STEP_STARTED: "leased+started",
        Ev.NODE_STARTED: "leased+started",
        Ev.HEARTBEAT: "heartbeat",
        Ev.STEP_RELEASED: "released",
        Ev.COMPLETED: "succeeded",
        Ev.FAILED: "failed",
        # A failure's name depends on its outcome (see _OUTCOME): retried or failed.
        Ev.STEP_FAILED: "failed",
        Ev.RECONCILE_FAILED: "failed",
        Ev.NODE_FAILED: "failed",
        Ev.NODE_RETRYING: "retried",
        Ev.RETRIED: "retried",
        Ev.RESUMED: "retried",
        Ev.CANCEL_REQUESTED: "cancel requested",
        Ev.CANCELLED: "cancelled",
        # Waits: a step parked on a signal, a timer, a lock or a snooze; a DAG node
        # parked until its sub-workflow ends.
        Ev.STEP_WAITING: "waiting",
        Ev.NODE_WAITING: "waiting",
        Ev.SIGNAL_RECEIVED: "signal received",
        Ev.TIMER_FIRED: "timer fired",
        Ev.STALE_SIGNAL_DROPPED: "stale signal dropped",
        Ev.SIGNAL_REJECTED: "signal rejected",
        Ev.DEAD_LETTERED: "dead-lettered",
        Ev.QUARANTINED: "dead-lettered",
        Ev.DELETED: "deleted",
    }
)
"""Lifecycle events and their names."""

DETAIL: Mapping[Ev, str] = MappingProxyType(
    {
        Ev.STEP_COMPLETED: "step completed",
        Ev.PROGRESS_SET: "progress saved",
        Ev.RECONCILED: "reconciled",
        # Written while the step still runs (``ctx.wait_token``); the wait itself is the
        # STEP_WAITING that follows, so naming both "waiting" would count one wait twice.
        Ev.WAIT_TOKEN: "wait token reserved",
        Ev.NODE_DISPATCHED: "node dispatched",
        Ev.NODE_COMPLETED: "node completed",
    }
)
"""Step-level detail around the lifecycle events, and its names."""

_OUTCOME = {"retry": "retried", "stall": "retried", "fail": "failed"}
_BY_OUTCOME = (Ev.STEP_FAILED, Ev.RECONCILE_FAILED, Ev.NODE_FAILED)


def lifecycle_name(event: EventRecord) -> str | None:
    """The lifecycle name of one event, or None for step-level detail (and for an event
    type this version does not know)."""
    if event.event_type in _BY_OUTCOME:
        return _OUTCOME.get(str(event.payload.get("outcome")))
    try:
        return LIFECYCLE.get(Ev(event.event_type))
    except ValueError:
        return None


def lifecycle(events: Iterable[EventRecord]) -> list[tuple[str, EventRecord]]:
    """``(name, event)`` for every event of the log that is a lifecycle event."""
    out = []
    for event in events:
        name = lifecycle_name(event)
        if name is not None:
            out.append((name, event))
    return out
