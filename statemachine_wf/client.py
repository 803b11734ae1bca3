"""The producer and operator API: start, inspect, cancel, resume, retry, verify.

Starting records intent and returns at once; no runner needs to be up. Every operator
action is a version-checked decision like the runner's, retried on a lost CAS.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from . import decide, inbox, live
from .decide import Decision
from .errors import (
    MAX_DURATION,
    ConcurrencyConflict,
    InputError,
    InvalidState,
    NotFound,
    StoreUnavailable,
    UnknownWorkflowType,
)
from .events import EventRecord, Status
from .fold import Projection, fold
from .limits import check_payload, check_value, text_problem
from .store import Commit, InstanceRecord, NewInstance, Store
from .waits import NewSignal
from .workflow import SIGNAL_PATTERN, Workflow, WorkflowSpec

T = TypeVar("T")


def once_more(call: Callable[[], T]) -> T:
    """``call()``, and once more if the database connection was lost under it.

    After a database restart the first call on a connection opened before it can fail
    (the store discards the dead connections it can see at checkout, but not one that
    dies under a statement). Only callers for which a second run is safe use this: a
    read, or a write whose repetition is a no-op (each caller says why). No retry when
    the store could not get a connection within its ``pool_timeout``: it waited already.
    """
    try:
        return call()
    except StoreUnavailable as exc:
        if not exc.lost:
            raise
    return call()


def invalid_input(where: str, model: type[BaseModel], exc: ValidationError) -> InputError:
    """The :class:`InputError` for ``exc``: each failing field and its problem, no values
    (an input may hold secrets); pydantic's error is the ``__cause__`` (raise ``from``)."""
    fields = tuple(
        (".".join(str(p) for p in e["loc"]) or "(input)", e["msg"]) for e in exc.errors()
    )
    problems = "; ".join(f"{field}: {msg}" for field, msg in fields)
    return InputError(f"{where} does not fit {model.__name__}: {problems}", fields=fields)


def wait_for_status(
    get: Callable[[str], InstanceRecord],
    instance_id: str,
    *,
    timeout: float,
    statuses: Sequence[Status] | None = None,
) -> InstanceRecord:
    """Poll ``get(instance_id)`` until its status is one of ``statuses`` (default: terminal).

    For scripts and tests; shared by the state-machine and DAG clients.
    """
    wanted = set(statuses) if statuses else {s for s in Status if s.terminal}
    deadline = time.monotonic() + timeout
    while True:
        record = get(instance_id)
        if record.status in wanted:
            return record
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"instance {instance_id} is {record.status} at {record.step} after {timeout} s"
            )
        time.sleep(0.02)


def _statuses(status: Status | Sequence[Status] | None) -> list[Status] | None:
    if status is None:
        return None
    return [Status(status)] if isinstance(status, str) else [Status(s) for s in status]


def _new_instance(
    spec: WorkflowSpec,
    payload: dict[str, Any],
    key: str | None,
    priority: int,
    delay: float,
    run_at: datetime | None,
    instance_id: str | None = None,
) -> NewInstance:
    """What ``start`` and ``start_many`` write for one validated, size-checked input."""
    return NewInstance(
        id=instance_id or str(uuid.uuid4()),
        type=spec.workflow_type,
        input=payload,
        initial=spec.initial,
        idempotency_key=key,
        priority=priority,
        delay=delay,
        run_at=None if run_at is None else run_at.timestamp(),
    )


class InvalidId(InputError, NotFound):
    """An instance id that is not a UUID: bad input (an :class:`InputError`), and so also
    certainly no instance (a :class:`NotFound`, which callers catching that still see)."""


MAX_PRIORITY = 2**31 - 1
"""The largest priority (the database column is a 32-bit integer)."""


def check_id(instance_id: Any, name: str = "instance_id") -> str:
    """``instance_id`` as given, if it is a UUID string; else :class:`InvalidId`.

    Every Client and DagClient method taking an instance id checks it first, so a
    malformed id is the same error on both stores (never a driver error, never NotFound).
    """
    if isinstance(instance_id, str) and 32 <= len(instance_id) <= 45:
        try:
            uuid.UUID(instance_id)
        except ValueError:
            pass
        else:
            return instance_id
    shown = instance_id if isinstance(instance_id, str) and len(instance_id) <= 60 else None
    if shown is None:
        raise InvalidId(f"{name} must be a UUID, got a {type(instance_id).__name__}")
    raise InvalidId(f"no workflow instance {shown!r}: {name} must be a UUID")


def check_priority(priority: Any) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InputError(f"priority must be a whole number, got {priority!r}")
    if priority < 0:
        raise InputError(f"priority must be >= 0, got {priority}")
    if priority > MAX_PRIORITY:
        raise InputError(f"priority must be <= {MAX_PRIORITY}, got {priority}")
    return priority


def check_delay(delay: Any, name: str = "delay") -> float:
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise InputError(f"{name} must be a number of seconds, got {delay!r}")
    if delay < 0:
        raise InputError(f"{name} must be >= 0, got {delay}")
    if not (math.isfinite(delay) and delay <= MAX_DURATION):
        raise InputError(
            f"{name} must be a finite number of seconds <= {MAX_DURATION:.0f}, got {delay}"
        )
    return float(delay)


def check_text(value: Any, name: str, *, optional: bool = True) -> str | None:
    """A non-empty string without NUL or lone surrogates (no store can keep those)."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise InputError(f"{name} must be a non-empty string, got {type(value).__name__}")
    problem = text_problem(value)
    if problem:
        raise InputError(f"{name} {problem}")
    return value


def _check_schedule(priority: int, delay: float, run_at: datetime | None) -> None:
    check_priority(priority)
    check_delay(delay)
    if run_at is not None and not isinstance(run_at, datetime):
        raise InputError(f"run_at must be a datetime, got {type(run_at).__name__}")
    if run_at is not None and delay:
        raise InputError("give delay or run_at, not both")
    if run_at is not None and run_at.tzinfo is None:
        raise InputError(f"run_at must be timezone-aware, got {run_at.isoformat()}")
    if run_at is not None and run_at.timestamp() - time.time() > MAX_DURATION:
        raise InputError(
            f"run_at must be at most {MAX_DURATION:.0f} seconds (100 years) from now, "
            f"got {run_at.isoformat()}"
        )


class Client:
    """Start and manage workflow instances.

    Args:
        store: the store the runners use.
        workflows: classes whose types may be started by name (``start("shop.order.v1",
            ...)``); starting by class needs no registration.
    """

    def __init__(self, store: Store, workflows: Sequence[type[Workflow[Any, Any]]] = ()) -> None:
        self.store = store
        self.classes = {cls.spec().workflow_type: cls for cls in workflows}

    def start(
        self,
        workflow: type[Workflow[Any, Any]] | str,
        input: BaseModel | Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        priority: int = 100,
        delay: float = 0.0,
        run_at: datetime | None = None,
        instance_id: str | None = None,
    ) -> str:
        """Record the intent to run ``workflow`` and return the instance id at once.

        The input is validated by the workflow's input model, and its size checked
        (:func:`~statemachine_wf.limits.check_payload`), before anything is written.
        The same ``idempotency_key`` returns the first instance's id and starts nothing.
        ``priority``: lower runs first. ``delay`` (seconds) or ``run_at`` (an aware
        datetime; past means now): when it may start.

        Raises:
            InputError: the input does not fit the model (names each field and its problem;
                pydantic's ``ValidationError`` is the ``__cause__``), a bad schedule, or
                the idempotency key belongs to an instance of another type.
            PayloadTooLarge: the input is over the payload limit (states the limit).
            UnknownWorkflowType: a type name that is not registered with this client.
            StoreUnavailable: the database could not be reached (a lost connection is
                tried once more first).
        """
        cls = self._class(workflow)
        spec = cls.spec()
        model = spec.input_model
        _check_schedule(priority, delay, run_at)
        check_text(idempotency_key, "idempotency_key")
        if instance_id is not None:
            check_id(instance_id)
        # Deep, NUL, lone surrogate, NaN: named, before pydantic (which recurses).
        check_value("input", input.model_dump() if isinstance(input, BaseModel) else input)
        try:
            data = input if isinstance(input, model) else model.model_validate(input)
        except ValidationError as exc:
            raise invalid_input("input", model, exc) from exc
        payload = data.model_dump(mode="json")
        check_value("input", payload)
        check_payload("input", payload)
        new = _new_instance(spec, payload, idempotency_key, priority, delay, run_at, instance_id)
        new_id, created = self._create(new)
        if not created:
            existing = self.get(new_id)
            if existing.type != spec.workflow_type:
                raise InputError(
                    f"idempotency key {idempotency_key!r} already started a "
                    f"{existing.type} ({new_id}), not a {spec.workflow_type}"
                )
        return new_id

    def start_many(
        self,
        workflow: type[Workflow[Any, Any]] | str,
        inputs: Sequence[BaseModel | Mapping[str, Any]],
        *,
        priority: int = 100,
        delay: float = 0.0,
        run_at: datetime | None = None,
        idempotency_keys: Sequence[str | None] | None = None,
    ) -> list[str]:
        """Record a batch of runs of ``workflow`` at once; their ids, in input order.

        Every input is validated and size-checked before anything is written, and the
        batch is written atomically: one statement on PostgreSQL, one transaction on
        SQLite. ``idempotency_keys`` (one per input, ``None`` for none): a key that is
        known, or repeated within the batch, gives the existing (first) run's id and
        starts nothing. ``priority``, ``delay`` and ``run_at`` apply to the whole batch,
        as in :meth:`start`.

        Raises:
            InputError: an input does not fit the model or is over the payload limit
                (both name its index), the keys do not match the inputs one for one, or
                a key already started another workflow type; nothing is written.
            UnknownWorkflowType: a type name that is not registered with this client.
        """
        cls = self._class(workflow)
        spec = cls.spec()
        model = spec.input_model
        _check_schedule(priority, delay, run_at)
        if isinstance(inputs, str | bytes | Mapping | BaseModel):
            raise InputError("inputs must be a sequence of inputs, one per run")
        keys: Sequence[str | None] = (
            [None] * len(inputs) if idempotency_keys is None else idempotency_keys
        )
        if isinstance(keys, str) or len(keys) != len(inputs):
            raise InputError(
                f"idempotency_keys must be a sequence with one key (or None) per input: "
                f"got {len(keys) if not isinstance(keys, str) else 'a string'} "
                f"for {len(inputs)} inputs"
            )
        news = []
        for i, (item, key) in enumerate(zip(inputs, keys, strict=True)):
            check_value(f"inputs[{i}]", item.model_dump() if isinstance(item, BaseModel) else item)
            try:
                data = item if isinstance(item, model) else model.model_validate(item)
            except ValidationError as exc:
                raise invalid_input(f"inputs[{i}]", model, exc) from exc
            if key is not None and (not isinstance(key, str) or not key):
                raise InputError(f"idempotency_keys[{i}] must be a non-empty string or None")
            check_text(key, f"idempotency_keys[{i}]")
            payload = data.model_dump(mode="json")
            check_value(f"inputs[{i}]", payload)
            check_payload(f"inputs[{i}]", payload)
            news.append(_new_instance(spec, payload, key, priority, delay, run_at))
        return [new_id for new_id, _ in self._create_many(news)] if news else []

    def _create(self, new: NewInstance) -> tuple[str, bool]:
        """``store.create``, once more if the connection was lost under it.

        Safe to repeat: with an idempotency key the second insert finds the first
        instance and inserts nothing; without one the id is this call's own (a fresh
        uuid, or the caller's ``instance_id``), so if it exists now, with this type and
        input, it is the lost statement that committed.
        """
        try:
            return self.store.create(new)
        except StoreUnavailable as exc:
            if not exc.lost:
                raise
        if new.idempotency_key is None and self._committed(new):
            return new.id, True
        try:
            return self.store.create(new)
        except ConcurrencyConflict:
            # The lost statement was still in flight and committed under our retry.
            if new.idempotency_key is None and self._committed(new):
                return new.id, True
            raise

    def _committed(self, new: NewInstance) -> bool:
        found = once_more(lambda: self.store.get(new.id))
        return found is not None and found.type == new.type and found.input == new.input

    def _create_many(self, news: Sequence[NewInstance]) -> list[tuple[str, bool]]:
        """``store.create_many``, once more if the connection was lost under it.

        The batch commits whole or not at all. Safe to repeat: if its first key-less
        instance (an id of this call's own) exists, the lost batch committed, and running
        the keyed ones again only looks their keys up; otherwise nothing was written and
        the batch runs again (a key then finds its instance as on any call).
        """
        try:
            return self.store.create_many(news)
        except StoreUnavailable as exc:
            if not exc.lost:
                raise
        unkeyed = [n for n in news if n.idempotency_key is None]
        if unkeyed and self._committed(unkeyed[0]):
            keyed = [n for n in news if n.idempotency_key is not None]
            resolved = iter(self.store.create_many(keyed) if keyed else [])
            return [(n.id, True) if n.idempotency_key is None else next(resolved) for n in news]
        return self.store.create_many(news)

    def _class(self, workflow: type[Workflow[Any, Any]] | str) -> type[Workflow[Any, Any]]:
        if isinstance(workflow, str):
            cls = self.classes.get(workflow)
            if cls is None:
                raise UnknownWorkflowType(workflow, list(self.classes))
            return cls
        return workflow

    # -- reading ----------------------------------------------------------------------
    def get(self, instance_id: str, *, include_deleted: bool = False) -> InstanceRecord:
        """The instance row. Raises :class:`NotFound` (also for a soft-deleted one)."""
        check_id(instance_id)
        record = once_more(lambda: self.store.get(instance_id))  # a read
        if record is None:
            raise NotFound(f"no workflow instance {instance_id!r}")
        if record.deleted_at is not None and not include_deleted:
            raise NotFound(f"workflow instance {instance_id!r} was deleted")
        return record

    def status(self, instance_id: str) -> Status:
        return self.get(instance_id).status

    def history(self, instance_id: str, *, include_deleted: bool = False) -> list[EventRecord]:
        """The instance's full event log, in order: its audit trail (see
        docs/architecture.md for how lifecycle events map onto it)."""
        self.get(instance_id, include_deleted=include_deleted)
        return once_more(lambda: self.store.events(instance_id))  # a read

    def wait(
        self, instance_id: str, *, timeout: float = 30.0, statuses: Sequence[Status] | None = None
    ) -> InstanceRecord:
        """Poll until the instance reaches one of ``statuses`` (default: terminal)."""
        return wait_for_status(self.get, instance_id, timeout=timeout, statuses=statuses)

    # -- verifying --------------------------------------------------------------------
    def verify(self, instance_id: str) -> dict[str, tuple[Any, Any]]:
        """Fields where the stored row differs from the fold of the log: ``{f: (row, log)}``.

        A DAG instance's log folds to its projection too (status, output, error).
        """
        record = self.get(instance_id)
        folded = self._fold(record).comparable()
        stored = record.projection().comparable()
        return {k: (stored[k], folded[k]) for k in stored if stored[k] != folded[k]}

    def rebuild(self, instance_id: str) -> Projection:
        """Recompute the instance row (state machine or DAG) from its log and store it."""
        projection = self._fold(self.get(instance_id))
        # Repeatable: it stores the fold of the log, the same value again.
        once_more(lambda: self.store.rebuild(instance_id, projection))
        return projection

    # -- signals ----------------------------------------------------------------------
    def signal(
        self,
        instance_id: str,
        name: str,
        payload: Any = None,
        *,
        token: str | None = None,
        delay: float = 0.0,
    ) -> int:
        """Send the signal ``name`` with a JSON ``payload``; return the signal's id.

        Delivery is durable and at least once: the signal is a row, applied by a runner
        to the instance's wait (no runner needs to be up now). With ``token`` (the wait's
        ``ctx.wait_token``) it applies only to that wait and is dropped as stale by any
        other; without one it is buffered until a wait for ``name`` consumes it.
        ``delay`` seconds postpone its delivery.

        Raises:
            NotFound: no instance with that id.
            InvalidState: the instance has ended (completed, failed or cancelled).
            InputError: ``name`` is not a signal the workflow declares (when its class is
                registered with this client; otherwise a runner dead-letters it), or the
                payload is not JSON.
            PayloadTooLarge: the payload's JSON is over the limit (names the limit).
        """
        check_id(instance_id)
        if not isinstance(name, str) or not SIGNAL_PATTERN.fullmatch(name):
            raise InputError(f"signal name {name!r} is not a valid name")
        if token is not None and (not isinstance(token, str) or not 0 < len(token) <= 200):
            raise InputError("token must be a non-empty string of at most 200 characters")
        check_text(token, "token")
        check_delay(delay)
        check_value(f"signal {name!r} payload", payload)  # deep, NUL, NaN: named
        try:
            json.dumps(payload, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise InputError(f"signal payload is not JSON: {exc}") from None
        check_payload(f"signal {name!r} payload", payload)
        record = self.get(instance_id)
        if record.status.terminal:
            raise InvalidState(
                f"workflow instance {instance_id} is {record.status}; it takes no more signals"
            )
        cls = self.classes.get(record.type)
        if cls is not None:
            accepted = cls.spec().signal_names
            if name not in accepted:
                raise InputError(
                    f"{record.type} has no signal {name!r}; it accepts {sorted(accepted)}"
                )
        return self.store.signal(NewSignal(instance_id, name, payload, token, delay))

    def signal_counts(self, instance_id: str | None = None) -> dict[str, int]:
        """Signal and timer rows per state, of one instance or of all.

        ``stale`` counts signals and timers dropped for carrying an old token; ``dead``
        those dead-lettered; ``pending`` those not yet applied (buffered ones included).
        """
        if instance_id is not None:
            self.get(instance_id)  # checks the id
        return once_more(lambda: self.store.signal_counts(instance_id=instance_id))  # a read

    def _fold(self, record: InstanceRecord) -> Projection:
        events = once_more(lambda: self.store.events(record.id))  # a read
        if record.kind == "dag":
            from .dag.interpret import project  # the DAG package imports this module

            return project(events)
        return fold(events)

    # -- operating --------------------------------------------------------------------
    def cancel(self, instance_id: str) -> InstanceRecord:
        """Cancel: at once if no runner holds it, else at the running step's end.

        A DAG instance is cancelled at once (see :meth:`DagClient.cancel`).
        """
        if self.get(instance_id).kind == "dag":
            from .dag.client import DagClient  # the DAG package imports this module

            return DagClient(self.store).cancel(instance_id)

        def make(record: InstanceRecord, state: Projection, leased: bool) -> Decision:
            if record.status.terminal:
                raise InvalidState(f"instance {instance_id} is already {record.status}")
            if state.cancel_requested and leased:
                return Decision((), state, decide.KeepTask())
            return decide.cancel(state, leased=leased)

        return self._operate(instance_id, make)

    def resume(self, instance_id: str) -> InstanceRecord:
        """Resume a STALLED instance now instead of on its own schedule."""

        def make(record: InstanceRecord, state: Projection, leased: bool) -> Decision:
            if record.status != Status.STALLED:
                raise InvalidState(f"only a STALLED instance can be resumed; it is {record.status}")
            if leased:
                raise InvalidState(f"instance {instance_id} is being worked on right now")
            return decide.resume(state)

        return self._operate(instance_id, make)

    def retry(self, instance_id: str) -> InstanceRecord:
        """Run a FAILED instance again from the step that failed."""

        def make(record: InstanceRecord, state: Projection, leased: bool) -> Decision:
            if record.status != Status.FAILED:
                raise InvalidState(f"only a FAILED instance can be retried; it is {record.status}")
            return decide.retry(state)

        return self._operate(instance_id, make)

    # -- the inbox: dead letters, retention -------------------------------------------
    def dead_letters(self, *, limit: int = 100) -> list[dict[str, Any]]:
        """The newest dead letters first: id, instance_id, envelope, reason, worker,
        created_at, and redriven_at/redriven_by/redrive_instance_id once redriven."""
        return once_more(lambda: self.store.dead_letters(limit=limit))  # a read

    def dead_letter(self, letter_id: int) -> dict[str, Any]:
        """One dead letter. Raises :class:`NotFound`."""
        letter = once_more(lambda: self.store.dead_letter_get(letter_id))  # a read
        if letter is None:
            raise NotFound(f"no dead letter {letter_id}")
        return letter

    def redrive(self, letter_id: int, *, by: str | None = None) -> inbox.Redrive:
        """Start the letter's envelope again, or retry/resume its instance; mark it
        redriven (kept, not deleted). A second redrive does nothing."""
        return inbox.redrive(self, letter_id, by=by or f"{socket.gethostname()}:{os.getpid()}")

    def delete(self, instance_id: str) -> None:
        """Soft-delete a finished instance: hidden from list and status until purged.

        Raises:
            NotFound: no such instance.
            InvalidState: it is still active (cancel it first).
        """
        record = self.get(instance_id, include_deleted=True)
        if record.deleted_at is not None:
            return
        if not record.status.terminal:
            raise InvalidState(f"instance {instance_id} is {record.status}; cancel it first")
        # Repeatable: it only sets deleted_at where it is not set yet.
        once_more(lambda: self.store.soft_delete(instance_id))

    def purge(self, *, older_than: float, batch_size: int = 1000, soft: bool = False) -> int:
        """Delete finished (COMPLETED, FAILED, CANCELLED) instances, with their events and
        tasks, that finished more than ``older_than`` seconds ago; ``soft`` only marks
        them deleted. In batches of ``batch_size``, one transaction each; active
        instances are never touched. Returns how many."""
        return inbox.purge(self, older_than=older_than, batch_size=batch_size, soft=soft)

    def purge_dead_letters(self, *, older_than: float, batch_size: int = 1000) -> int:
        """Delete dead letters written more than ``older_than`` seconds ago, redriven or
        not (an unredriven letter's envelope goes with it), in batches of ``batch_size``,
        one transaction each. Returns how many."""
        return inbox.purge_dead_letters(self, older_than=older_than, batch_size=batch_size)

    def _operate(
        self,
        instance_id: str,
        make: Callable[[InstanceRecord, Projection, bool], Decision],
    ) -> InstanceRecord:
        for _ in range(20):
            record = self.get(instance_id)
            if record.kind == "dag":
                raise InvalidState(f"instance {instance_id} is a DAG instance: not supported")
            task = once_more(lambda: self.store.task(instance_id))  # a read
            leased = task is not None and task.leased
            state = record.projection(in_flight=task is not None and task.in_flight)
            decision = make(record, state, leased)
            if not decision.events:
                return record
            try:
                self.store.apply(Commit(instance_id, record.version, decision, worker=None))
            except ConcurrencyConflict:
                continue
            except StoreUnavailable as exc:
                # The version decides. Not moved: the lost commit did not happen, and the
                # decision is made again on a fresh connection (the CAS makes a second
                # apply of a stale decision impossible). Moved, and the log ends with
                # this decision's events: it committed (or an identical decision won the
                # CAS, the same outcome). Otherwise say so rather than guess.
                if not exc.lost:
                    raise
                now = self.get(instance_id)
                if now.version == record.version:
                    continue
                if self._ends_with(instance_id, decision):
                    return now
                raise
            return self.get(instance_id)
        raise ConcurrencyConflict(instance_id, -1)

    def _ends_with(self, instance_id: str, decision: Decision) -> bool:
        """Does the instance's log end with ``decision``'s events?"""
        events = once_more(lambda: self.store.events(instance_id))  # a read
        tail = events[-len(decision.events) :]
        mine = [(str(e.event_type), e.node, e.attempt, e.payload) for e in decision.events]
        return [(e.event_type, e.node, e.attempt, e.payload) for e in tail] == mine

    def watch(self, instance_id: str, *, after_seq: int = 0) -> AsyncIterator[live.Update]:
        """Its events as they commit, until it ends: :func:`statemachine_wf.live.watch`."""
        check_id(instance_id)
        return live.watch(self.store, instance_id, after_seq=after_seq)

    # list and count come last: a method named ``list`` would shadow the builtin in the
    # annotations of the methods after it.
    def list(
        self,
        *,
        status: Status | Sequence[Status] | None = None,
        type_prefix: str | None = None,
        limit: int = 50,
        offset: int = 0,
        include_deleted: bool = False,
    ) -> list[InstanceRecord]:
        """Instances, newest first: one page of at most ``limit`` after skipping ``offset``.

        Args:
            status: only instances in this status (or any of these); default any.
            type_prefix: only types starting with this (``billing.``; an exact type such
                as ``billing.invoice.v1`` matches itself); default any.
            limit: the page size (>= 0).
            offset: how many to skip first (>= 0); page on with ``offset += limit``, and
                use :meth:`count` for the total with the same filters.
            include_deleted: also soft-deleted instances (hidden by default).

        Raises:
            ValueError: a negative ``limit`` or ``offset``.
        """
        if limit < 0 or offset < 0:
            raise ValueError(f"limit and offset must be >= 0, got limit={limit}, offset={offset}")
        return self.store.list_instances(
            status=_statuses(status),
            type_prefix=type_prefix,
            limit=limit,
            offset=offset,
            include_deleted=include_deleted,
        )

    def count(
        self,
        *,
        status: Status | Sequence[Status] | None = None,
        type_prefix: str | None = None,
        include_deleted: bool = False,
    ) -> int:
        """How many instances :meth:`list` pages through with the same filters."""
        return self.store.count_instances(
            status=_statuses(status), type_prefix=type_prefix, include_deleted=include_deleted
        )
