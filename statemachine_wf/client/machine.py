"""The producer and operator API: start, inspect, cancel, resume, retry, verify.

Starting records intent and returns at once; no runner needs to be up. Every operator
action is a version-checked decision like the runner's, retried on a lost CAS.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from ..core.fold import Projection
from ..core.store import InstanceRecord, NewInstance, Store
from ..core.waits import NewSignal
from ..definition.checks import (  # re-exported: callers import these from here
    MAX_PRIORITY,
    InvalidId,
    check_delay,
    check_id,
    check_priority,
    check_schedule,
    check_text,
    invalid_input,
)
from ..definition.events import EventRecord, Status
from ..definition.ids import new_instance_id
from ..definition.limits import check_payload, check_value
from ..definition.workflow import SIGNAL_PATTERN, Workflow, WorkflowSpec
from ..errors import (
    ConcurrencyConflict,
    InputError,
    InvalidState,
    NotFound,
    StoreUnavailable,
    UnknownWorkflowType,
)
from ..runtime import operations
from ..runtime.observe import trace_context
from ..runtime.operations import once_more
from . import inbox, live
from .signers import SignerQueue, signer_queues

__all__ = [
    "MAX_PRIORITY",
    "Client",
    "InvalidId",
    "check_delay",
    "check_id",
    "check_priority",
    "check_text",
    "invalid_input",
    "once_more",
]


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
        id=instance_id or new_instance_id(),
        type=spec.workflow_type,
        input=payload,
        initial=spec.initial,
        idempotency_key=key,
        priority=priority,
        delay=delay,
        run_at=None if run_at is None else run_at.timestamp(),
        trace_context=trace_context(),
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
        (:func:`~statemachine_wf.definition.limits.check_payload`), before anything is written.
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
        check_schedule(priority, delay, run_at)
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
        # Again on what will be stored: the model's dump (defaults, validators,
        # serializers) need not be what the caller passed.
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
        check_schedule(priority, delay, run_at)
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
        return operations.get(self.store, instance_id, include_deleted=include_deleted)

    def status(self, instance_id: str) -> Status:
        return self.get(instance_id).status

    def signers(self, *, chain_id: int | None = None) -> list[SignerQueue]:
        """Each busy signer's transaction queue: slot holder, waiting instances, last
        nonce, pending hash and its age (:func:`statemachine_wf.client.signers.signer_queues`)."""
        return signer_queues(self.store, chain_id=chain_id)

    def history(self, instance_id: str, *, include_deleted: bool = False) -> list[EventRecord]:
        """The instance's full event log, in order: its audit trail (see
        docs/architecture.md for how lifecycle events map onto it)."""
        self.get(instance_id, include_deleted=include_deleted)
        return once_more(lambda: self.store.events(instance_id))  # a read

    def wait(
        self, instance_id: str, *, timeout: float = 30.0, statuses: Sequence[Status] | None = None
    ) -> InstanceRecord:
        """Poll until the instance reaches one of ``statuses`` (default: terminal)."""
        return operations.wait(self.get, instance_id, timeout=timeout, statuses=statuses)

    # -- verifying --------------------------------------------------------------------
    def verify(self, instance_id: str) -> dict[str, tuple[Any, Any]]:
        """Fields where the stored row differs from the fold of the log: ``{f: (row, log)}``.

        A DAG instance's log folds to its projection too (status, output, error).
        """
        record = self.get(instance_id)
        folded = operations.project(self.store, record).comparable()
        stored = record.projection().comparable()
        return {k: (stored[k], folded[k]) for k in stored if stored[k] != folded[k]}

    def rebuild(self, instance_id: str) -> Projection:
        """Recompute the instance row (state machine or DAG) from its log and store it."""
        projection = operations.project(self.store, self.get(instance_id))
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
        # The insert's trigger refuses an ended instance too, as it must (the instance may
        # end after this read); the read is for the type's signal names and a plain error.
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
        # Not once_more: after a lost connection the insert may have committed, and a
        # second row is a second delivery (an untokened one could resolve a later wait).
        return self.store.signal(NewSignal(instance_id, name, payload, token, delay))

    def signal_counts(self, instance_id: str | None = None) -> dict[str, int]:
        """Signal and timer rows per state, of one instance or of all.

        ``stale`` counts signals and timers dropped for carrying an old token; ``dead``
        those dead-lettered; ``pending`` those not yet applied (buffered ones included).
        """
        if instance_id is not None:
            self.get(instance_id)  # checks the id
        return once_more(lambda: self.store.signal_counts(instance_id=instance_id))  # a read

    # -- operating --------------------------------------------------------------------
    def cancel(self, instance_id: str) -> InstanceRecord:
        """Cancel: at once if no runner holds it, else at the running step's end.

        A DAG instance is cancelled at once (see :meth:`DagClient.cancel`).
        """
        return operations.cancel(self.store, instance_id)

    def resume(self, instance_id: str) -> InstanceRecord:
        """Resume a STALLED instance now instead of on its own schedule."""
        return operations.resume(self.store, instance_id)

    def retry(self, instance_id: str) -> InstanceRecord:
        """Run a FAILED instance again from the step that failed."""
        return operations.retry(self.store, instance_id)

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

    def purge(
        self,
        *,
        older_than: float,
        batch_size: int = 1000,
        soft: bool = False,
        on_batch: Callable[[int], None] | None = None,
    ) -> int:
        """Delete finished (COMPLETED, FAILED, CANCELLED) instances, with their events and
        tasks, that finished more than ``older_than`` seconds ago; ``soft`` only marks
        them deleted. In batches of ``batch_size``, one transaction each; active
        instances are never touched. Returns how many. ``on_batch(n)`` is called after
        each committed batch (for a progress display)."""
        return inbox.purge(
            self.store, older_than=older_than, batch_size=batch_size, soft=soft, on_batch=on_batch
        )

    def purge_dead_letters(
        self,
        *,
        older_than: float,
        batch_size: int = 1000,
        on_batch: Callable[[int], None] | None = None,
    ) -> int:
        """Delete dead letters written more than ``older_than`` seconds ago, redriven or
        not (an unredriven letter's envelope goes with it), in batches of ``batch_size``,
        one transaction each. Returns how many. ``on_batch`` as in :meth:`purge`."""
        return inbox.purge_dead_letters(
            self.store, older_than=older_than, batch_size=batch_size, on_batch=on_batch
        )

    def watch(self, instance_id: str, *, after_seq: int = 0) -> AsyncIterator[live.Update]:
        """Its events as they commit, until it ends: :func:`statemachine_wf.client.live.watch`."""
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
