"""The records the store port takes and returns (instances, tasks, claims, commits).

Plain frozen dataclasses, re-exported by :mod:`statemachine_wf.core.store`; the port's roles
(:mod:`statemachine_wf.core.ports`) and :class:`~statemachine_wf.core.store.Store` are written in
terms of them. Kept apart from both so that the roles and their union can import them
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..definition.events import EventRecord, NewEvent, Status
from .decide import Decision
from .fold import Projection
from .waits import SignalRecord

if TYPE_CHECKING:
    # The pure DAG core (core/dag_interpret.py imports only events, fold and definition/dag_models),
    # for DagCommit's annotation; not at run time: the dag package's __init__ imports its
    # handlers, which import the store port.
    from .dag_interpret import DagDecision


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
    """The waits of the current step visit (see :mod:`statemachine_wf.core.waits`)."""
    waiting: str | None = None
    """The key of the wait the instance is parked on, if any."""
    parent_node: str | None = None
    """The parent DAG's node whose task waits for this instance (a sub-workflow)."""
    deleted_at: float | None = None
    """Set by a soft delete: hidden from list/status until purged."""
    trace_context: str | None = None
    """The starter's trace context (W3C headers as JSON), continued by the run's spans."""

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
class LockRecord:
    """One held durable lock (``wf_locks``) and the live instances queued for it."""

    key: str
    holder: str
    since: float
    """Unix time the holder took it."""
    waiters: tuple[str, ...] = ()
    """Instances waiting for it (PENDING, RUNNING or STALLED), oldest wait first."""
    waiting_since: tuple[float, ...] = ()
    """Unix time each of ``waiters`` began to wait, in the same order."""


@dataclass(frozen=True, slots=True)
class Claimant:
    """Who a sleeping worker claims as (``Store.wait_for_work``): a start of one of
    ``types`` made in this process while it sleeps may be leased to it in the start's own
    commit, its first step started there, as a claim would (PostgreSQL)."""

    worker: str
    lease: float
    incarnation: str
    types: frozenset[str]
    """The state-machine types its claims take."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A task this runner now holds.

    ``started`` is true when the claim itself appended the next attempt's STEP_STARTED
    (the common case: claim and intent in one commit), after a ``TIMER_FIRED`` when the
    instance waited and its one due pending row was the wait's own timer. Otherwise the
    runner must look at the instance and decide: a step in flight is in doubt, a cancel
    request stops it, a wait takes its signals.

    ``signals``: for a waiting instance that did not start, its due pending signal and
    timer rows, read by the claim itself (what :meth:`Store.pending_signals` returns);
    ``None`` when the claim did not read them (the runner reads them itself). For one
    started after its timer fired: that timer's row, as the claim applied it.

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
    trace_context: str | None = None
    """The starter's trace context (W3C headers as JSON), stored with the instance."""


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
    status: Status | None = None
    """The instance's status at ``version``, when the committer knows it (the state its
    decision was made on); None when it does not. The CAS makes it the row's status, since
    every write of the status moves the version, so a store may leave the status column
    alone when the decision keeps it (SQLite: ``apply_head``)."""


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
    trace_context: str | None = None
    """The starter's trace context (W3C headers as JSON), stored with the instance."""


@dataclass(frozen=True, slots=True)
class DagSnapshot:
    """A DAG instance as one scheduling decision reads it (version first, then the rest)."""

    instance: InstanceRecord
    events: list[EventRecord]
    """The events after the ``after_seq`` asked for (all of them by default)."""
    open_slots: tuple[str, ...]
    """The nodes that have a task right now (dispatched and not yet settled)."""


@dataclass(frozen=True, slots=True)
class DagApplied:
    """What a committed DAG decision became (``DagRuns.dag_commit``)."""

    version: int
    """The instance's version after the commit."""
    seqs: tuple[int, ...] = ()
    """The seqs the decision's events took, in the decision's order: the committer folds
    them into its cached view at their place in the log, without reading it back."""
    task: TaskRecord | None = None
    """The node task the commit leased to the committing worker (a hand-off or a
    sibling), or None."""
    more: tuple[TaskRecord, ...] = ()
    """Further siblings leased in the commit (``siblings`` > 1): one a grouped worker."""


@dataclass(frozen=True, slots=True)
class DagCommit:
    """A DAG decision to apply, if the instance is still at ``version``, or with
    ``blockers`` also on a later version while one of those node tasks is open (see
    ``dag_vouch.blockers``)."""

    instance_id: str
    version: int
    decision: DagDecision
    worker: str | None
    blockers: tuple[str, ...] = ()
