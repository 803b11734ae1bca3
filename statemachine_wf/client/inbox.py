"""The durable inbox's operator side: dead-letter redrive, retention, durations.

:class:`~statemachine_wf.client.machine.Client` exposes these as methods; they live here to keep
the client small. Every change goes through the store: a redrive starts a run or retries
an instance with the client's own version-checked operations and then marks the dead
letter (never deletes it); a purge deletes finished instances in batches, one
transaction each, and never touches active work.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.store import RESOLVE_ON_CLAIM, NewInstance, Store
from ..definition.events import Status
from ..definition.ids import new_instance_id
from ..definition.limits import check_payload
from ..definition.workflow import Workflow
from ..errors import InputError, InvalidState, NotFound, UnknownWorkflowType
from ..runtime import operations

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> float:
    """``"30d"``, ``"12h"``, ``"15m"``, ``"90s"`` or plain seconds, as seconds.

    Raises:
        ValueError: anything else (the message names the accepted forms).
    """
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (use a number with s, m, h, d or w, e.g. 30d)")
    return float(match.group(1)) * _UNIT[match.group(2)]


class Producer(Protocol):
    """What a redrive needs of :class:`~statemachine_wf.Client`: its store, the classes
    it can start by name, and its validating ``start`` (so this module does not import
    the client that calls it)."""

    @property
    def store(self) -> Store: ...

    @property
    def classes(self) -> Mapping[str, type[Workflow[Any, Any]]]: ...

    def start(
        self, workflow: Any, input: Any, *, idempotency_key: str | None = ..., priority: int = ...
    ) -> str: ...


@dataclass(frozen=True, slots=True)
class Redrive:
    """What redriving a dead letter did.

    ``action`` is ``started`` (a new run from the letter's start envelope), ``retried``
    (a FAILED instance runs again), ``resumed`` (a STALLED one is due now), ``none`` (the
    instance is already active or finished: nothing to do) or ``already`` (the letter
    had been redriven before; nothing was done this time).
    """

    letter_id: int
    instance_id: str | None
    action: str


def redrive(client: Producer, letter_id: int, *, by: str) -> Redrive:
    """Re-enqueue a dead letter's envelope, or retry its instance; mark it redriven.

    Redriving twice is harmless: a marked letter is left alone, a start uses the
    envelope's idempotency key (or one derived from the letter), and an instance that
    is already active is not touched.

    Raises:
        NotFound: no such dead letter, or its instance has been purged.
        UnknownWorkflowType: the envelope's type is still not hosted or registered.
    """
    store = client.store
    letter = store.dead_letter_get(letter_id)
    if letter is None:
        raise NotFound(f"no dead letter {letter_id}")
    if letter.get("redriven_at") is not None:
        return Redrive(letter_id, letter.get("redrive_instance_id"), "already")
    instance_id = letter["instance_id"]
    if instance_id is None:
        instance_id = _start_envelope(client, letter_id, letter["envelope"])
        action = "started"
    else:
        action = _retry_instance(client, str(instance_id))
    # Marked after the action, not before: a crash in between leaves the letter
    # unmarked, and redriving it again is harmless (the same key finds the run, an
    # instance the first redrive moved on is left alone); marked first, it could be lost.
    store.mark_redriven(letter_id, instance_id=instance_id, by=by)
    return Redrive(letter_id, instance_id, action)


def _start_envelope(client: Producer, letter_id: int, envelope: dict[str, Any]) -> str:
    type_name = envelope.get("type")
    if not isinstance(type_name, str) or "input" not in envelope:
        raise InputError(f"dead letter {letter_id} has no start envelope (type and input)")
    # A key of the letter's own when the envelope has none: a second redrive of an
    # unmarked letter (see redrive) finds the run the first one started.
    key = envelope.get("idempotency_key") or f"swf:redrive:{letter_id}"
    priority = int(envelope.get("priority") or 100)
    if type_name in client.classes:
        return client.start(type_name, envelope["input"], idempotency_key=key, priority=priority)
    if type_name not in client.store.registered_types():
        raise UnknownWorkflowType(type_name, sorted(client.classes))
    # Known to a runner but not to this client: like a SQL producer, the claiming runner
    # resolves the initial step and validates the input (not too deep, no NUL: here).
    check_payload(f"dead letter {letter_id} input", envelope["input"])
    new_id, _ = client.store.create(
        NewInstance(
            id=new_instance_id(),
            type=type_name,
            input=envelope["input"],
            initial=RESOLVE_ON_CLAIM,
            idempotency_key=key,
            priority=priority,
        )
    )
    return new_id


def _retry_instance(client: Producer, instance_id: str) -> str:
    record = client.store.get(instance_id)
    if record is None:
        raise NotFound(f"instance {instance_id} of this dead letter has been purged")
    if record.kind != "machine":
        raise InvalidState(
            f"instance {instance_id} is a {record.kind}; only state machines can be "
            "retried in place (start the DAG again)"
        )
    moves: dict[Status, tuple[str, Callable[[str], Any]]] = {
        Status.FAILED: ("retried", lambda i: operations.retry(client.store, i)),
        Status.STALLED: ("resumed", lambda i: operations.resume(client.store, i)),
    }
    if record.status not in moves:
        return "none"
    action, operate = moves[record.status]
    try:
        operate(instance_id)
    except InvalidState:
        # Someone else moved it on first (a concurrent redrive, a runner): nothing to do.
        return "none"
    return action


def purge(
    store: Store,
    *,
    older_than: float,
    batch_size: int,
    soft: bool = False,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Delete (``soft``: mark deleted) finished instances older than ``older_than`` s.

    Each batch is its own transaction, so a long purge never holds locks for long and can
    be interrupted; the loop ends at the first batch smaller than ``batch_size``.
    ``on_batch`` is called with each batch's count once it committed (a progress bar).
    """
    return _in_batches(
        lambda: store.purge_batch(older_than=older_than, batch_size=batch_size, soft=soft),
        older_than=older_than,
        batch_size=batch_size,
        on_batch=on_batch,
    )


def purge_dead_letters(
    store: Store,
    *,
    older_than: float,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Delete dead letters written more than ``older_than`` s ago, redriven or not.

    A letter is evidence of what failed and, for a start refused before any instance
    existed (an unknown type from SQL), the only copy of its envelope: redrive or export
    what still matters before its age runs out. Batches as in :func:`purge`.
    """
    return _in_batches(
        lambda: store.purge_dead_letters_batch(older_than=older_than, batch_size=batch_size),
        older_than=older_than,
        batch_size=batch_size,
        on_batch=on_batch,
    )


def _in_batches(
    one: Callable[[], int],
    *,
    older_than: float,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    if older_than < 0:
        raise ValueError(f"older_than must be >= 0 seconds, got {older_than}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    total = 0
    while True:
        n = one()
        total += n
        if on_batch is not None:
            on_batch(n)
        if n < batch_size:
            return total
        time.sleep(0)  # let other threads of this process in between batches
