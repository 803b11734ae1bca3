"""What both stores share: turning decisions into row values, and rows into records."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ..decide import Decision
from ..events import EventRecord, NewEvent, Status
from ..fold import Projection
from ..store import DagCommit, InstanceRecord, TaskRecord

Encode = Callable[[Any], Any]


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def projection_params(state: Projection, encode: Encode) -> dict[str, Any]:
    return {
        "status": str(state.status),
        "step": state.step,
        "step_attempts": state.step_attempts,
        "attempts": encode(state.attempts),
        "progress": encode(state.progress),
        "error": None if state.error is None else encode(state.error),
        "cancel_requested": state.cancel_requested,
    }


def event_dicts(decision: Decision) -> list[dict[str, Any]]:
    return [
        {
            "node": e.node,
            "event_type": str(e.event_type),
            "attempt": e.attempt,
            "payload": e.payload,
            "error": e.error,
        }
        for e in decision.events
    ]


def new_event_dicts(events: tuple[NewEvent, ...]) -> list[dict[str, Any]]:
    return [
        {
            "node": e.node,
            "event_type": str(e.event_type),
            "attempt": e.attempt,
            "payload": e.payload,
            "error": e.error,
        }
        for e in events
    ]


def dag_apply_params(commit: DagCommit, encode: Encode) -> dict[str, Any]:
    """The parameters of ``dag_apply`` (both dialects)."""
    d = commit.decision
    retry = d.retry
    return {
        "id": commit.instance_id,
        "version": commit.version,
        "worker": commit.worker,
        "status": None if d.status is None else str(d.status),
        "progress": None if d.output is None else encode(d.output),
        "error": None if d.error is None else encode(d.error),
        "events": encode(new_event_dicts(d.events)),
        "finish": d.finish,
        "done": d.done,
        "retry": None if retry is None else retry.node,
        "retry_delay": 0.0 if retry is None else retry.delay,
        "retry_failures": 0 if retry is None else retry.failures,
        "dispatch": encode(
            [{"node": t.node, "delay": t.delay, "attempt": t.attempt} for t in d.dispatch]
        ),
    }


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def _time(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):  # a timestamp inside to_jsonb(row)
        return datetime.fromisoformat(value).timestamp()
    return float(value.timestamp())


def instance_record(row: Mapping[str, Any]) -> InstanceRecord:
    return InstanceRecord(
        id=str(row["id"]),
        type=row["type"],
        kind=row["kind"],
        status=Status(row["status"]),
        step=row["step"],
        step_attempts=int(row["step_attempts"]),
        attempts=_json(row["attempts"]) or {},
        version=int(row["version"]),
        input=_json(row["input"]),
        progress=_json(row["progress"]) or {},
        error=_json(row["error"]),
        cancel_requested=bool(row["cancel_requested"]),
        idempotency_key=row["idempotency_key"],
        priority=int(row["priority"]),
        parent_id=None if row["parent_id"] is None else str(row["parent_id"]),
        created_at=_time(row["created_at"]),
        updated_at=_time(row["updated_at"]),
    )


def task_record(row: Mapping[str, Any], *, now: float | None = None) -> TaskRecord:
    due_at = _time(row["due_at"])
    keys = row.keys() if hasattr(row, "keys") else row
    if "leased" in keys:
        leased = bool(row["leased"])
    else:
        leased = row["lease_owner"] is not None and now is not None and due_at > now
    return TaskRecord(
        id=int(row["id"]),
        instance_id=str(row["instance_id"]),
        slot=row["slot"],
        node=row["node"],
        kind=row["kind"],
        type=row["type"],
        priority=int(row["priority"]),
        due_at=due_at,
        attempt=int(row["attempt"]),
        in_flight=bool(row["in_flight"]),
        failures=int(row["failures"]),
        lease_owner=row["lease_owner"],
        lease_token=row["lease_token"] if "lease_token" in keys else None,
        leased=leased,
    )


def event_record(row: Mapping[str, Any]) -> EventRecord:
    return EventRecord(
        seq=int(row["seq"]),
        instance_id=str(row["instance_id"]),
        event_type=row["event_type"],
        node=row["node"],
        attempt=row["attempt"],
        payload=_json(row["payload"]) or {},
        error=_json(row["error"]),
        worker=row["worker"],
        created_at=_time(row["created_at"]),
    )


def fast_start_allowed(instance: InstanceRecord, task: TaskRecord) -> bool:
    """Whether a claim may write the next attempt's intent itself (the common case)."""
    return (
        instance.kind == "machine"
        and not task.in_flight
        and not instance.cancel_requested
        and instance.status in (Status.PENDING, Status.RUNNING, Status.STALLED)
    )


class Wakeup:
    """How a store's idle workers sleep: one wake-up rouses one worker (the baton).

    A worker that claims something calls :meth:`nudge` to pass the baton on, so a burst
    is picked up by as many workers as it needs and a single task costs a single claim.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` s; True when woken rather than timed out."""
        with self._cond:
            return self._cond.wait(timeout=timeout)

    def nudge(self) -> None:
        """Wake one sleeping worker."""
        with self._cond:
            self._cond.notify(1)

    def wake_all(self) -> None:
        """Wake every sleeping worker (shutdown)."""
        with self._cond:
            self._cond.notify_all()
