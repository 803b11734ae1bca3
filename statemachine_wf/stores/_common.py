"""What both stores share: turning decisions into row values, and rows into records."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from ..core.decide import Decision, Park
from ..core.fold import Projection
from ..core.store import DagCommit, InstanceRecord, TaskRecord
from ..core.waits import SignalRecord
from ..definition.events import EventRecord, NewEvent, Status
from ..definition.limits import MAX_STORED_DEPTH, checked_dumps, nests_deeper
from ..errors import InputError

if TYPE_CHECKING:
    from ..core.dag_interpret import DagDecision

Encode = Callable[[Any], Any]


class Translating:
    """A context manager that raises ``translate(exc)`` from an exception that leaves its
    block (``exc`` itself when that is None): each dialect's ``wrap_errors``.

    A class, not a ``@contextmanager`` generator: it is entered around every write and
    read of a step, where a generator's setup cost about 1 us each time.
    """

    __slots__ = ("_translate",)

    def __init__(self, translate: Callable[[BaseException], BaseException | None]) -> None:
        self._translate = translate

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if exc is not None:
            translated = self._translate(exc)
            if translated is not None:
                raise translated from exc
        return False


def dumps(value: Any) -> str:
    """The JSON text a store writes; refuses what some store cannot keep (DataRejected)."""
    return checked_dumps(value, sort_keys=True)


class Undecodable(dict[str, Any]):
    """A stored JSON value this process cannot decode (nested too deep, or not JSON).

    Written by an old version, a direct UPDATE or a producer before migration 010. It is a
    ``dict`` (``{"undecodable": reason}``) so the read commands show it instead of
    crashing; a claim that meets one quarantines the instance with the reason (a
    dead letter), and a signal whose payload is one is dead-lettered.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(undecodable=reason)
        self.reason = reason


def loads(text: str | bytes) -> Any:
    """``json.loads``, but a value nested too deep to decode is :class:`Undecodable`.

    Raises:
        ValueError: ``text`` is not JSON.
    """
    # Counted before decoding: with the recursion limit raised (py_ecc sets 100,000) a
    # deep value would crash the decoder's C stack instead of raising RecursionError.
    if isinstance(text, str):
        deep = nests_deeper(text, MAX_READ_DEPTH)
    else:  # decoded for the scan only when the bracket count says it may be deep
        brackets = text.count(b"[") + text.count(b"{")
        deep = brackets > MAX_READ_DEPTH and nests_deeper(
            text.decode(errors="replace"), MAX_READ_DEPTH
        )
    if deep:
        return Undecodable(
            f"stored JSON ({len(text)} bytes) is nested too deep to decode "
            f"(over {MAX_READ_DEPTH} levels)"
        )
    try:
        return json.loads(text)
    except RecursionError:
        return Undecodable(f"stored JSON ({len(text)} bytes) is nested too deep to decode")


MAX_READ_DEPTH = MAX_STORED_DEPTH + 16
"""Deeper than this a stored value is :class:`Undecodable` even when Python could decode
it: the deepest a store writes (:data:`~statemachine_wf.definition.limits.MAX_STORED_DEPTH`) plus
what a read wraps around it (a row as JSON, an aggregate of rows)."""


def undecodable(record: InstanceRecord) -> str | None:
    """Why a field of ``record`` could not be decoded, or None when every field was."""
    for name in ("input", "progress", "error", "attempts", "waits"):
        value = getattr(record, name)
        if isinstance(value, Undecodable):
            return f"stored {name}: {value.reason}"
    return None


def key_clash(key: str, existing_id: str, existing_type: str, wanted_type: str) -> InputError:
    """A batch start whose idempotency key already started another workflow type."""
    return InputError(
        f"idempotency key {key!r} already started a {existing_type} ({existing_id}), "
        f"not a {wanted_type}"
    )


def projection_params(state: Projection, encode: Encode) -> dict[str, Any]:
    wait = state.wait or {}
    return {
        "status": str(state.status),
        "step": state.step,
        "step_attempts": state.step_attempts,
        "attempts": encode(state.attempts),
        "progress": encode(state.progress),
        "error": None if state.error is None else encode(state.error),
        "cancel_requested": state.cancel_requested,
        # The wait columns: `waits` and `waiting_key` (the projection), and the wait's
        # kind, token and deadline, kept in their own columns for SQL (the signal trigger).
        "waits": encode(state.waits),
        "waiting_key": state.waiting,
        "waiting_kind": wait.get("kind"),
        "waiting_token": wait.get("token"),
        "waiting_until": wait.get("until"),
    }


def event_dicts(decision: Decision) -> list[dict[str, Any]]:
    return new_event_dicts(decision.events)


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


def dag_wakes(decision: DagDecision) -> bool:
    """Whether a DAG commit must wake another worker (the ``dag_apply`` query's NOTIFY rule).

    Only when somebody else has work: more than one node task added, a delayed one, or
    a rescheduled one (the timer holder must learn its due time). A single task due now
    is left to the committing worker, which claims next anyway.
    """
    added = decision.dispatch
    return len(added) > 1 or any(t.delay > 0 for t in added) or decision.retry is not None


def dag_apply_params(commit: DagCommit, encode: Encode) -> dict[str, Any]:
    """The parameters of ``dag_apply``'s pieces (both dialects)."""
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
        "also_done": dumps(d.also_done) if d.also_done else "[]",  # a group's
        "also_n": len(d.also_done),  # SQLite skips its DELETE without any
        "sib_n": 1,  # a group's: one sibling for each of its workers, or a run's several
        "ev_top": None,  # SQLite: the newest seq before the siblings' NODE_STARTED (a probe)
        "sib_tokens": "[]",
        "retry": None if retry is None else retry.node,
        "retry_delay": 0.0 if retry is None else retry.delay,
        "retry_failures": 0 if retry is None else retry.failures,
        "dead_letter": d.dead_letter,
        "step": None,  # the dead letter's envelope: a DAG has no one current step
        "dispatch": encode(
            [{"node": t.node, "delay": t.delay, "attempt": t.attempt} for t in d.dispatch]
        ),
        "n_dispatch": len(d.dispatch),  # SQLite skips the dispatch's INSERT without one
        "token": None,  # take "handed": the dispatched task leased under this token
        "sib_token": None,  # take "sibling": another due task leased under this one
        "lease": 0.0,
    }


def letter_record(row: Mapping[str, Any], *, decoded: bool) -> dict[str, Any]:
    """A ``wf_dead_letters`` row as a dict: the envelope decoded; with a driver that
    decodes JSON itself (``decoded``, PostgreSQL) uuids as strings and times as unix
    seconds instead."""
    out = dict(row)
    if not decoded:
        out["envelope"] = _json(row["envelope"])
        return out
    for key in ("instance_id", "redrive_instance_id"):
        if out.get(key) is not None:
            out[key] = str(out[key])
    for key in ("created_at", "redriven_at"):
        if isinstance(out.get(key), datetime):
            out[key] = out[key].timestamp()
    return out


def _json(value: Any) -> Any:
    if not isinstance(value, str | bytes):
        return value
    try:
        return loads(value)
    except ValueError as exc:  # text a direct write left in a SQLite JSON column
        return Undecodable(f"stored text is not JSON: {exc}")


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
        waits=_json(row["waits"]) or {},
        waiting=row["waiting_key"],
        parent_node=row["parent_node"],
        deleted_at=_deleted_at(row),
        # keys(): a sqlite3.Row's `in` looks at its values; a row read before migration
        # 014 (or by a query naming its columns) has no trace context.
        trace_context=row["trace_context"] if "trace_context" in row.keys() else None,  # noqa: SIM118
    )


def signal_record(row: Mapping[str, Any], *, decoded: bool) -> SignalRecord:
    """A ``wf_signals`` row; ``decoded`` when the driver already parsed the JSON (jsonb)."""
    raw = row["payload"]
    payload, problem = raw, None
    if not decoded:
        try:
            payload = loads(raw)
        except ValueError as exc:
            problem = str(exc)
    if isinstance(payload, Undecodable):
        problem = payload.reason
    return SignalRecord(
        id=int(row["id"]),
        instance_id=str(row["instance_id"]),
        kind=row["kind"],
        name=row["name"],
        payload=payload,
        token=row["token"],
        due_at=_time(row["due_at"]),
        state=row["state"],
        created_at=_time(row["created_at"]),
        payload_error=problem,
    )


def signal_write_params(decision: Decision, encode: Encode) -> dict[str, Any]:
    """The ``wf_signals`` side of a decision (both dialects)."""
    w = decision.signals
    op = decision.task
    return {
        "settled": encode([{"id": i, "state": st} for i, st in w.settled]),
        "dead": encode([{"envelope": env, "reason": why} for env, why in w.dead]),
        "timer_token": None if w.timer is None else w.timer.token,
        "timer_due": None if w.timer is None else w.timer.due,
        "wait_name": op.name if isinstance(op, Park) else None,
        "until": op.until if isinstance(op, Park) else None,
    }


def signal_counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(SIGNAL_STATES, 0)
    for r in rows:
        counts[str(r["state"])] = int(r["n"])
    return counts


SIGNAL_STATES = ("pending", "applied", "stale", "dead", "void")


def _deleted_at(row: Mapping[str, Any]) -> float | None:
    value = row["deleted_at"] if "deleted_at" in row.keys() else None  # noqa: SIM118 (sqlite3.Row)
    return None if value is None else _time(value)


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


def new_lease_token(incarnation: str = "") -> str:
    """A claim's lease token: ``incarnation/random`` (just random without an incarnation).

    The incarnation (one per Runner object: host:pid:random) tells whose claim it is even
    when two runners share a worker id: heartbeats and releases are fenced by it.
    """
    return f"{incarnation}/{uuid.uuid4().hex}" if incarnation else uuid.uuid4().hex


def incarnation_prefix(incarnation: str | None) -> str | None:
    """The lease-token prefix of ``incarnation``'s claims (None: any claim)."""
    return None if not incarnation else incarnation + "/"
