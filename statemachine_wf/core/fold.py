"""The fold: an instance's projection is its events applied in ``seq`` order.

Every write the runtime makes computes the new projection with :func:`apply` from the
events it appends, so the stored row and the fold of the log agree by construction;
:func:`fold` recomputes it from scratch for ``verify`` and ``rebuild``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..definition.events import Ev, EventRecord, NewEvent, Status
from ..definition.workflow import COMPLETED
from ..errors import InvalidState


@dataclass(frozen=True, slots=True)
class Projection:
    """The part of an instance row that is derived from its log."""

    status: Status = Status.PENDING
    step: str | None = None
    step_attempts: int = 0
    in_flight: bool = False
    progress: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    cancel_requested: bool = False
    attempts: dict[str, int] = field(default_factory=dict)
    """The last attempt number used for each step; numbers never repeat within a run."""
    waits: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The waits of the current step visit, by key (see :mod:`statemachine_wf.core.waits`):
    a reserved token, the wait in progress, or its outcome. Cleared when the step ends."""
    waiting: str | None = None
    """The key of the wait the instance is parked on, if any."""

    def current_step(self) -> str:
        """The current step; an instance started from SQL has none before its first claim."""
        if self.step is None:
            raise InvalidState("the instance has no current step yet")
        return self.step

    def next_attempt(self, step: str) -> int:
        return self.attempts.get(step, 0) + 1

    def comparable(self) -> dict[str, Any]:
        """The fields ``verify`` compares with the stored row."""
        return {
            "status": str(self.status),
            "step": self.step,
            "step_attempts": self.step_attempts,
            "progress": self.progress,
            "error": self.error,
            "cancel_requested": self.cancel_requested,
            "attempts": self.attempts,
            "waits": self.waits,
            "waiting": self.waiting,
        }

    @property
    def in_doubt(self) -> bool:
        """Whether the current step's last attempt may have had an effect nobody judged.

        Either it is still in flight (``in_flight``: the task's flag, which a claim reads)
        or it ended by a failing reconcile hook (its error says ``in_doubt``) and stopped
        there, STALLED or FAILED: resuming it must ask the hook first.
        """
        return self.in_flight or bool(self.error and self.error.get("in_doubt"))

    @property
    def wait(self) -> dict[str, Any] | None:
        """The wait the instance is parked on (its entry in ``waits``), if any."""
        return None if self.waiting is None else self.waits.get(self.waiting)


def apply(state: Projection, event: NewEvent | EventRecord) -> Projection:
    """One event applied to a projection. Unknown event types change nothing."""
    et = event.event_type
    payload = event.payload
    if et == Ev.CREATED:
        return Projection(step=payload.get("initial"))
    if et == Ev.STEP_STARTED:
        # The intent, written before the action runs: from here until the attempt's
        # outcome is logged the step is in flight, and a claim that finds it so (a crash)
        # must ask the reconcile hook before running it again.
        return Projection(  # every field named: a step's hot path (replace is 2x slower)
            status=Status.RUNNING,
            step=event.node,
            step_attempts=event.attempt or 0,
            in_flight=True,
            progress=state.progress,
            error=state.error,
            cancel_requested=state.cancel_requested,
            attempts={**state.attempts, str(event.node): event.attempt or 0},
            waits=state.waits,
            waiting=state.waiting,
        )
    if et == Ev.STEP_RELEASED:
        # Handed back before any worker ran it: nothing to ask a reconcile hook about; the
        # attempt stays counted and the next claim starts the one after it.
        return replace(state, in_flight=False)
    if et == Ev.PROGRESS_SET:
        return replace(state, progress={**state.progress, **payload.get("progress", {})})
    if et == Ev.STEP_COMPLETED:
        progress = {**state.progress, **payload.get("progress", {})}
        target = payload.get("to")
        # Waits belong to one visit of a step: leaving it forgets them, so a later visit
        # (a loop back) waits afresh and a stale signal's token matches nothing.
        done = target == COMPLETED
        return Projection(  # every field named, as for STEP_STARTED
            status=state.status,
            step=state.step if done else target,
            step_attempts=state.step_attempts if done else state.attempts.get(str(target), 0),
            in_flight=False,
            progress=progress,
            error=None,
            cancel_requested=state.cancel_requested,
            attempts=state.attempts,
            waits={},
            waiting=None,
        )
    if et in (Ev.STEP_FAILED, Ev.RECONCILE_FAILED):
        outcome = payload.get("outcome")
        # A "retry" outcome keeps the status (RUNNING): the task is simply due later.
        status = {"stall": Status.STALLED, "fail": Status.FAILED}.get(str(outcome), state.status)
        return replace(state, status=status, in_flight=False, error=event.error)
    if et == Ev.STEP_WAITING:
        key = payload.get("wait")
        if key is None:  # a lock or a snooze: not a wait on a signal or timer
            return replace(state, in_flight=False)
        entry: dict[str, Any] = {
            k: payload[k] for k in ("kind", "name", "token", "until") if k in payload
        }
        return replace(
            state, in_flight=False, waits={**state.waits, str(key): entry}, waiting=str(key)
        )
    if et == Ev.WAIT_TOKEN:
        key = str(payload.get("wait"))
        # First token wins: once handed out, a wait's token never changes within the
        # step's visit (a re-run after a crash finds it and hands out the same one).
        if key in state.waits:
            return state
        return replace(state, waits={**state.waits, key: {"token": payload.get("token")}})
    if et in (Ev.SIGNAL_RECEIVED, Ev.TIMER_FIRED):
        key = str(payload.get("wait"))
        entry = dict(state.waits.get(key, {}))
        entry["outcome"] = payload.get("outcome")
        if et == Ev.SIGNAL_RECEIVED:
            entry["payload"] = payload.get("payload")
        return replace(state, waits={**state.waits, key: entry}, waiting=None)
    if et == Ev.RECONCILED:
        progress = {**state.progress, **payload.get("progress", {})}
        decision = payload.get("decision")
        if decision == "goto":
            return replace(
                state,
                status=Status.RUNNING,
                step=payload.get("to"),
                step_attempts=state.attempts.get(str(payload.get("to")), 0),
                in_flight=False,
                progress=progress,
                error=None,
                waits={},
                waiting=None,
            )
        if decision == "complete":
            return replace(
                state, in_flight=False, progress=progress, error=None, waits={}, waiting=None
            )
        if decision == "rerun":
            # A finding: the attempt's effect is absent, so it is no longer in doubt.
            return replace(state, in_flight=False, progress=progress)
        # "unchanged": nothing to correct. Either way the same commit starts the step
        # again (decide.reconciled), and its STEP_STARTED sets what follows.
        return replace(state, progress=progress)
    if et == Ev.COMPLETED:
        return replace(state, status=Status.COMPLETED, in_flight=False)
    if et == Ev.CANCEL_REQUESTED:
        return replace(state, cancel_requested=True)
    if et == Ev.CANCELLED:
        return replace(state, status=Status.CANCELLED, in_flight=False, waiting=None)
    if et == Ev.QUARANTINED:
        # Set aside by a runner (a row it cannot run). The task keeps its own in-flight
        # flag, so a step that was in doubt is still asked about after a resume.
        return replace(state, status=Status.STALLED, in_flight=False, error=event.error)
    if et == Ev.RESUMED:
        return replace(state, status=Status.RUNNING, error=None)
    if et == Ev.RETRIED:
        return replace(
            state,
            status=Status.RUNNING,
            in_flight=False,
            error=None,
        )
    return state


def apply_all(state: Projection, events: Iterable[NewEvent | EventRecord]) -> Projection:
    for event in events:
        state = apply(state, event)
    return state


def fold(events: Iterable[EventRecord]) -> Projection:
    """The projection of an instance, from its whole log."""
    ordered: list[NewEvent | EventRecord] = [*sorted(events, key=lambda e: e.seq)]
    return apply_all(Projection(), ordered)
