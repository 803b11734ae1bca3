"""The ``Store`` port: what the runtime needs from a database, and the records it returns.

Two implementations ship in :mod:`statemachine_wf.stores` (SQLite and PostgreSQL) and
pass the same contract suite. Every scheduling write goes through :meth:`Store.apply`,
which appends a :class:`~statemachine_wf.decide.Decision`'s events, writes the projection
they produce and changes the task, all in one commit gated by the instance's version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .decide import Decision
from .events import EventRecord, NewEvent, Status
from .fold import Projection
from .waits import NewSignal, SignalRecord

if TYPE_CHECKING:
    from .dag.interpret import DagDecision
    from .stores._live import LiveHub


TypeKind = Literal["machine", "dag"]
KIND_NAMES: dict[str, str] = {"machine": "state-machine", "dag": "DAG"}
"""How errors name each kind of workflow type."""


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """One row of ``wf_instances``."""

    id: str
    type: str
    kind: str
    status: Status
    step: str | None
    step_attempts: int
    attempts: dict[str, int]
    version: int
    input: dict[str, Any]
    progress: dict[str, Any]
    error: dict[str, Any] | None
    cancel_requested: bool
    idempotency_key: str | None
    priority: int
    parent_id: str | None
    created_at: float
    updated_at: float
    waits: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The waits of the current step visit (see :mod:`statemachine_wf.waits`)."""
    waiting: str | None = None
    """The key of the wait the instance is parked on, if any."""
    parent_node: str | None = None
    """The parent DAG's node whose task waits for this instance (a sub-workflow)."""
    deleted_at: float | None = None
    """Set by a soft delete: hidden from list/status until purged."""

    def projection(self, *, in_flight: bool = False) -> Projection:
        return Projection(
            status=self.status,
            step=self.step,
            step_attempts=self.step_attempts,
            in_flight=in_flight,
            progress=dict(self.progress),
            error=self.error,
            cancel_requested=self.cancel_requested,
            attempts=dict(self.attempts),
            waits={k: dict(v) for k, v in self.waits.items()},
            waiting=self.waiting,
        )

    @property
    def wait(self) -> dict[str, Any] | None:
        """The wait the instance is parked on: kind, name, token, until; or None."""
        return None if self.waiting is None else self.waits.get(self.waiting)


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One row of ``wf_tasks``: a runnable unit and its lease."""

    id: int
    instance_id: str
    slot: str
    node: str
    kind: str
    type: str
    priority: int
    due_at: float
    attempt: int
    in_flight: bool
    failures: int
    lease_owner: str | None
    leased: bool = False
    """A runner holds it right now (owner set and lease not expired, by the store's clock)."""
    lease_token: str | None = None
    """Set fresh by every claim: identifies *this* claim, not just the worker."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A task this runner now holds.

    ``started`` is true when the claim itself appended the next attempt's STEP_STARTED
    (the common case: claim and intent in one commit). Otherwise the runner must look at
    the instance and decide: a step in flight is in doubt, a cancel request stops it.

    ``signals``: for a waiting instance, its due pending signal and timer rows, read by
    the claim itself (what :meth:`Store.pending_signals` returns); ``None`` when the claim
    did not read them (the runner reads them itself).

    ``more``: whether other due tasks were seen when this one was claimed (the runner
    wakes one more idle worker only then). True when the claim did not look.
    """

    task: TaskRecord
    instance: InstanceRecord
    started: bool
    signals: tuple[SignalRecord, ...] | None = None
    more: bool = True


@dataclass(frozen=True, slots=True)
class NewInstance:
    """What ``start`` writes: the instance, its WORKFLOW_CREATED event and its task."""

    id: str
    type: str
    input: dict[str, Any]
    initial: str
    kind: str = "machine"
    idempotency_key: str | None = None
    priority: int = 100
    delay: float = 0.0
    parent_id: str | None = None
    parent_node: str | None = None
    """Set for a DAG's sub-workflow: finishing wakes that node's task of ``parent_id``."""
    run_at: float | None = None
    """Unix time it may start at; wins over ``delay`` when set."""


RESOLVE_ON_CLAIM = ""
"""The initial step of a run started from SQL: the claiming runner resolves it."""


@dataclass(frozen=True, slots=True)
class Commit:
    """A decision to apply, if the instance is still at ``version``."""

    instance_id: str
    version: int
    decision: Decision
    worker: str | None
    lease: float = 30.0


@dataclass(frozen=True, slots=True)
class NewDagInstance:
    """What starting a DAG writes: the instance (kind 'dag', RUNNING), its first events
    (WORKFLOW_CREATED with the definition, NODE_DISPATCHED of the start) and the start
    node's task; ``name``/``version`` record the definition it runs (``test`` for a test
    run of an unsaved graph, which can be deleted whole)."""

    id: str
    type: str
    input: dict[str, Any]
    start: str
    events: tuple[NewEvent, ...]
    name: str
    version: int | None = None
    test: bool = False
    idempotency_key: str | None = None
    priority: int = 100
    delay: float = 0.0
    parent_id: str | None = None


@dataclass(frozen=True, slots=True)
class DagSnapshot:
    """A DAG instance as one scheduling decision reads it (version first, then the rest)."""

    instance: InstanceRecord
    events: list[EventRecord]
    """The events after the ``after_seq`` asked for (all of them by default)."""
    open_slots: tuple[str, ...]
    """The nodes that have a task right now (dispatched and not yet settled)."""


@dataclass(frozen=True, slots=True)
class DagCommit:
    """A DAG decision to apply, if the instance is still at ``version``."""

    instance_id: str
    version: int
    decision: DagDecision
    worker: str | None


class Store(Protocol):
    """Persistence of instances, the log and the task queue."""

    dialect: str

    def migrate(self) -> int:
        """Apply pending migrations; return the schema version."""
        ...

    def create(self, new: NewInstance) -> tuple[str, bool]:
        """Insert an instance; with a known idempotency key return ``(existing_id, False)``."""
        ...

    def create_many(self, news: Sequence[NewInstance]) -> list[tuple[str, bool]]:
        """Insert a batch atomically (PostgreSQL: one statement; SQLite: one transaction);
        ``(id, created)`` per item, in order. A known idempotency key, or one repeated in
        the batch, yields the existing (first) id and inserts nothing.

        Raises:
            InputError: a key already started another workflow type; nothing is written.
        """
        ...

    def get(self, instance_id: str) -> InstanceRecord | None: ...

    def task(self, instance_id: str, slot: str = "") -> TaskRecord | None: ...

    def events(self, instance_id: str, *, after_seq: int = 0) -> list[EventRecord]:
        """The instance's events with seq > ``after_seq``, in seq order."""
        ...

    def list_instances(
        self,
        *,
        status: Sequence[Status] | None = None,
        type_prefix: str | None = None,
        limit: int = 100,
        include_deleted: bool = False,
        offset: int = 0,
    ) -> list[InstanceRecord]:
        """Instances newest first (ties by id), after skipping ``offset`` of them."""
        ...

    def count_instances(
        self,
        *,
        status: Sequence[Status] | None = None,
        type_prefix: str | None = None,
        include_deleted: bool = False,
    ) -> int:
        """How many instances ``list_instances`` with these filters would page through."""
        ...

    def claim(
        self,
        *,
        worker: str,
        types: Sequence[str],
        lease: float,
        limit: int = 1,
        incarnation: str = "",
    ) -> list[Claim]:
        """Lease up to ``limit`` due state-machine tasks (kind 'machine') of these types.

        ``incarnation`` (the claiming Runner object's) prefixes the claim's lease token.

        Rows that cannot be decoded are quarantined (STALLED, dead-lettered) and skipped.
        """
        ...

    def claim_instance(
        self, instance_id: str, *, worker: str, lease: float, incarnation: str = ""
    ) -> Claim | None:
        """Lease this instance's task if nobody holds it, without starting anything."""
        ...

    def apply(self, commit: Commit) -> int:
        """Apply a decision; return the new version.

        Raises:
            ConcurrencyConflict: the instance is no longer at ``commit.version``.
        """
        ...

    def heartbeat(
        self,
        *,
        worker: str,
        lease: float,
        log_every: float | None = None,
        incarnation: str | None = None,
    ) -> int:
        """Extend every lease ``worker`` holds (with ``incarnation``: only the leases of
        that incarnation's claims, never a twin's); return how many.

        With ``log_every``, a claim seen held at an earlier heartbeat gets a HEARTBEAT
        event in the same statement, at most once per ``log_every`` seconds.
        """
        ...

    def release(
        self,
        *,
        worker: str,
        instance_ids: Sequence[str] | None = None,
        token: str | None = None,
        incarnation: str | None = None,
    ) -> None:
        """Give leases back: the tasks are due now, in-flight marks kept.

        ``instance_ids=None`` releases every lease of ``worker``: a runner restarted with a
        stable id does this for each dead incarnation of it before it starts, so its
        previous life's work is due now instead of after the lease runs out. ``token``:
        only a lease taken by the claim with that lease token (a hand-back);
        ``incarnation``: only the leases of that incarnation's claims.
        """
        ...

    def lease_incarnations(self, *, worker: str) -> list[str]:
        """The incarnations whose claims hold leases of ``worker`` that have not run out."""
        ...

    def active(self, *, types: Sequence[str] | None = None) -> list[InstanceRecord]:
        """RUNNING and STALLED instances (of these types), for start-up reconciliation."""
        ...

    def next_due(
        self, *, types: Sequence[str], dag_types: Sequence[str] | None = None
    ) -> float | None:
        """Seconds until the next task of these types is due (0 if one is due), or None.

        With ``dag_types``: state-machine tasks of ``types`` and DAG node tasks of
        ``dag_types`` only (what a runner's two claims take), not any task of a type.
        """
        ...

    def wait_for_work(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True when woken because work may have arrived.

        A wake-up rouses *one* waiting worker; a worker that then claims something passes
        the baton with :meth:`nudge`, so a burst is picked up by as many workers as it
        needs and a single new task costs a single claim.
        """
        ...

    def nudge(self) -> None:
        """Wake one waiting worker of this process."""
        ...

    def acquire_lock(self, key: str, instance_id: str) -> str:
        """Take the lock ``key`` for ``instance_id`` if free; return its holder either way.

        A caller that is not the holder is recorded as a waiter and woken on release.
        """
        ...

    def release_locks(self, instance_id: str, *, key: str | None = None) -> int:
        """Release ``key`` (or every lock) held by ``instance_id``; wake waiters."""
        ...

    def lock_holder(self, key: str) -> str | None: ...

    def wake_instances(self, instance_ids: Sequence[str]) -> None:
        """Make these instances' unleased tasks due now (a missed wake-up, made good)."""
        ...

    def wake(self) -> None:
        """Return every ``wait_for_work`` of this process now (shutdown)."""
        ...

    def wake_parent(self, child_id: str) -> None:
        """Make the parent's node task that waits for ``child_id`` due now, if unleased.

        A finishing child does this itself in its finishing commit; a parent node that
        parked itself calls it after re-reading a child that had already finished.
        """
        ...

    def children(self, parent_id: str) -> list[InstanceRecord]:
        """The instances started with ``parent_id`` (a DAG's sub-workflows)."""
        ...

    def dead_letter(
        self, *, instance_id: str | None, envelope: dict[str, Any], reason: str, worker: str
    ) -> None: ...

    def dead_letters(self, *, limit: int = 100) -> list[dict[str, Any]]: ...

    # -- the inbox: type registry, dead-letter redrive, retention -------------------
    def register_types(self, types: Sequence[str], *, by: str, kind: TypeKind = "machine") -> None:
        """Declare types a runner hosts (state machines: what a SQL producer may start).

        Raises:
            TypeKindConflict: a type is registered as the other kind; nothing is written.
        """
        ...

    def registered_types(self, kind: TypeKind = "machine") -> list[str]: ...

    def dead_letter_get(self, letter_id: int) -> dict[str, Any] | None: ...

    def mark_redriven(self, letter_id: int, *, instance_id: str | None, by: str) -> bool:
        """Mark a dead letter redriven (once); False when it already was."""
        ...

    def soft_delete(self, instance_id: str) -> bool:
        """Mark a terminal instance deleted; False when it is not terminal or not there."""
        ...

    def purge_batch(self, *, older_than: float, batch_size: int, soft: bool = False) -> int:
        """Delete (or, ``soft``, mark deleted) up to ``batch_size`` terminal instances
        that finished more than ``older_than`` seconds ago, in one transaction; return
        how many. Active instances are never touched."""
        ...

    def purge_dead_letters_batch(self, *, older_than: float, batch_size: int) -> int:
        """Delete up to ``batch_size`` dead letters written more than ``older_than``
        seconds ago, redriven or not, in one transaction; return how many."""
        ...

    def quarantine(self, instance_id: str, *, reason: str, worker: str) -> None:
        """Set aside an instance whose row cannot be used: STALLED, dead-lettered, task parked."""
        ...

    def rebuild(self, instance_id: str, projection: Projection) -> None:
        """Overwrite the instance's projection (``statemachine-wf rebuild``)."""
        ...

    def close(self) -> None: ...

    # -- signals and timers (wf_signals) -----------------------------------------------
    def signal(self, new: NewSignal) -> int:
        """Insert a signal row; return its id. The insert wakes the instance if it waits.

        Raises:
            NotFound: no such instance.
            InvalidState: the instance has ended.
        """
        ...

    def pending_signals(self, instance_id: str) -> list[SignalRecord]:
        """The instance's pending rows that are due, oldest first."""
        ...

    def signals(self, *, instance_id: str | None = None, limit: int = 100) -> list[SignalRecord]:
        """Signal and timer rows, newest first (of one instance, or of all)."""
        ...

    def signal_counts(self, *, instance_id: str | None = None) -> dict[str, int]:
        """Rows per state (``pending``, ``applied``, ``stale``, ``dead``, ``void``), of one
        instance or of all: ``stale`` is the stale-signal counter."""
        ...

    # -- DAG instances (kind='dag'): one task per dispatched node, slot = node id ------
    def dag_create(self, new: NewDagInstance) -> tuple[str, bool]:
        """Insert a DAG instance; a known idempotency key returns ``(existing_id, False)``."""
        ...

    def dag_claim(
        self,
        *,
        worker: str,
        types: Sequence[str],
        lease: float,
        limit: int = 1,
        incarnation: str = "",
    ) -> list[Claim]:
        """Lease due node tasks and append their NODE_STARTED (the next try) in one commit."""
        ...

    def dag_record(self, instance_id: str, event: NewEvent, *, worker: str | None) -> bool:
        """Append a once-per-run node event; False for a duplicate or an ended instance."""
        ...

    def dag_snapshot(self, instance_id: str, *, after_seq: int = 0) -> DagSnapshot | None:
        """The instance (version first), its events with seq > ``after_seq`` and the
        nodes that have a task; None if there is no such instance."""
        ...

    def dag_apply(self, commit: DagCommit) -> int:
        """Apply a DAG decision in one commit; return the new version.

        Raises:
            ConcurrencyConflict: the instance is no longer at ``commit.version``.
        """
        ...

    def dag_save(self, name: str, definition: dict[str, Any]) -> int:
        """Store a new immutable version of the definition ``name``; return its number."""
        ...

    def dag_definition(
        self, name: str, version: int | None = None
    ) -> tuple[int, dict[str, Any]] | None:
        """``(version, definition)``: the given version, or the latest."""
        ...

    def dag_definitions(self) -> list[tuple[str, int]]:
        """Every saved definition's name and latest version."""
        ...

    def dag_delete(self, name: str, *, cascade: bool = False) -> int:
        """Delete every version of ``name``; return how many.

        Raises:
            InvalidState: instances run it and ``cascade`` is false (with cascade they
                are deleted too, in the same transaction).
        """
        ...

    def dag_delete_test_run(self, instance_id: str) -> bool:
        """Delete a test run's instance, log and tasks in one transaction."""
        ...

    # -- live updates (statemachine_wf.live) ------------------------------------------------
    def live_hub(self) -> LiveHub:
        """This store's watchers, woken when an instance's log grows (any process)."""
        ...


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
