"""The producer and operator API: start, inspect, cancel, resume, retry, verify.

Starting records intent and returns at once; no runner needs to be up. Every operator
action is a version-checked decision like the runner's, retried on a lost CAS.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from . import decide
from .decide import Decision
from .errors import ConcurrencyConflict, InvalidState, NotFound, UnknownWorkflowType
from .events import EventRecord, Status
from .fold import Projection, fold
from .store import Commit, InstanceRecord, NewInstance, Store
from .workflow import Workflow


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
        instance_id: str | None = None,
    ) -> str:
        """Record the intent to run ``workflow`` and return the instance id at once.

        The input is validated by the workflow's input model before anything is written.
        The same ``idempotency_key`` returns the first instance's id and starts nothing.

        Raises:
            pydantic.ValidationError: the input does not fit the model (names the field).
            UnknownWorkflowType: a type name that is not registered with this client.
            InputError: the idempotency key belongs to an instance of another type.
        """
        cls = self._class(workflow)
        spec = cls.spec()
        model = spec.input_model
        data = input if isinstance(input, model) else model.model_validate(input)
        if priority < 0:
            raise ValueError(f"priority must be >= 0, got {priority}")
        if delay < 0:
            raise ValueError(f"delay must be >= 0, got {delay}")
        new_id, created = self.store.create(
            NewInstance(
                id=instance_id or str(uuid.uuid4()),
                type=spec.workflow_type,
                input=data.model_dump(mode="json"),
                initial=spec.initial,
                idempotency_key=idempotency_key,
                priority=priority,
                delay=delay,
            )
        )
        if not created:
            existing = self.get(new_id)
            if existing.type != spec.workflow_type:
                from .errors import InputError

                raise InputError(
                    f"idempotency key {idempotency_key!r} already started a "
                    f"{existing.type} ({new_id}), not a {spec.workflow_type}"
                )
        return new_id

    def _class(self, workflow: type[Workflow[Any, Any]] | str) -> type[Workflow[Any, Any]]:
        if isinstance(workflow, str):
            cls = self.classes.get(workflow)
            if cls is None:
                raise UnknownWorkflowType(workflow, list(self.classes))
            return cls
        return workflow

    # -- reading ----------------------------------------------------------------------
    def get(self, instance_id: str) -> InstanceRecord:
        """The instance row. Raises :class:`NotFound`."""
        record = self.store.get(instance_id)
        if record is None:
            raise NotFound(f"no workflow instance {instance_id!r}")
        return record

    def status(self, instance_id: str) -> Status:
        return self.get(instance_id).status

    def history(self, instance_id: str) -> list[EventRecord]:
        """The instance's full event log, in order."""
        self.get(instance_id)
        return self.store.events(instance_id)

    def wait(
        self, instance_id: str, *, timeout: float = 30.0, statuses: Sequence[Status] | None = None
    ) -> InstanceRecord:
        """Poll until the instance reaches one of ``statuses`` (default: terminal)."""
        return wait_for_status(self.get, instance_id, timeout=timeout, statuses=statuses)

    # -- verifying --------------------------------------------------------------------
    def verify(self, instance_id: str) -> dict[str, tuple[Any, Any]]:
        """Fields where the stored row differs from the fold of the log: ``{f: (row, log)}``."""
        record = self.get(instance_id)
        folded = fold(self.store.events(instance_id)).comparable()
        stored = record.projection().comparable()
        return {k: (stored[k], folded[k]) for k in stored if stored[k] != folded[k]}

    def rebuild(self, instance_id: str) -> Projection:
        """Recompute the instance row from its log and store it."""
        self.get(instance_id)
        projection = fold(self.store.events(instance_id))
        self.store.rebuild(instance_id, projection)
        return projection

    # -- operating --------------------------------------------------------------------
    def cancel(self, instance_id: str) -> InstanceRecord:
        """Cancel: at once if no runner holds it, else at the running step's end."""

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

    def _operate(
        self,
        instance_id: str,
        make: Callable[[InstanceRecord, Projection, bool], Decision],
    ) -> InstanceRecord:
        for _ in range(20):
            record = self.get(instance_id)
            task = self.store.task(instance_id)
            leased = task is not None and task.leased
            state = record.projection(in_flight=task is not None and task.in_flight)
            decision = make(record, state, leased)
            if not decision.events:
                return record
            try:
                self.store.apply(Commit(instance_id, record.version, decision, worker=None))
            except ConcurrencyConflict:
                continue
            return self.get(instance_id)
        raise ConcurrencyConflict(instance_id, -1)
