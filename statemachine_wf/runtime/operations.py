"""Version-checked operations on one instance, and the only CAS-retry loop.

Every change to an instance is a decision made on a read and committed only while the
instance's ``version`` is still the one read (the CAS in ``Store.apply`` and
``Store.dag_apply``). Losing the CAS means somebody else decided first; the loser reads
what they did and decides again. :func:`until_committed` is that loop, once, with one
bound, for the two clients' operations (cancel, resume, retry), the state-machine
driver's commit and the DAG executor's commit.

The operations of both clients live here too, behind a kind → :class:`Engine` lookup,
so a state-machine instance and a DAG instance are read, projected and cancelled by one
code path each instead of ``kind == "dag"`` tests spread over the callers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..core import dag_interpret as interpret
from ..core import decide
from ..core.decide import Decision
from ..core.fold import Projection, fold
from ..core.store import Commit, DagCommit, InstanceRecord, Store
from ..definition.checks import check_id
from ..definition.events import EventRecord, Status
from ..errors import ConcurrencyConflict, InvalidState, NotFound, StoreUnavailable

T = TypeVar("T")

STREAK = 32
"""Steps, or DAG nodes, a worker runs in a row after the one it claimed, carried on by its
own commits with no claim: a state machine's next step under the lease it holds, a DAG's
next node handed over or a fan-out's next branch. The commit after them hands the next
one back, due at once, and the worker claims in priority order: a higher-priority task
waits for at most this many steps of a long workflow, not for its end."""

CAS_TRIES = 200
"""How many lost CAS races one decision may take before its caller gives up.

Each loss means another writer committed in between, so the loop always makes progress
for somebody; the bound only stops a caller that keeps losing to a hot instance (a DAG
fanning out over many runners) from spinning forever. The caller says what giving up
means: :class:`ConcurrencyConflict` for a client, :class:`LeaseLost` for a runner.
"""


def until_committed(attempt: Callable[[int], T], *, gave_up: Callable[[], Exception]) -> T:
    """``attempt(n)`` until it returns, re-run while it loses the CAS.

    ``attempt`` reads (on ``n == 0`` it may use a read it already holds; after a loss it
    must read again, since the version it decided on is gone), decides and commits; a
    lost CAS surfaces as :class:`ConcurrencyConflict`. Deciding again on the fresh read
    is always safe: nothing of the losing decision was written.
    """
    for n in range(CAS_TRIES):
        try:
            return attempt(n)
        except ConcurrencyConflict:
            # No back-off: the loss means the winner has already committed, so the next
            # read sees its decision at once and there is nothing to wait for.
            continue
    raise gave_up()


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


# -- reading ---------------------------------------------------------------------------
def get(store: Store, instance_id: str, *, include_deleted: bool = False) -> InstanceRecord:
    """The instance row, for either kind. Raises :class:`NotFound` (also for a
    soft-deleted one unless ``include_deleted``) and :class:`InvalidId`."""
    check_id(instance_id)
    record = once_more(lambda: store.get(instance_id))  # a read
    if record is None:
        raise NotFound(f"no workflow instance {instance_id!r}")
    if record.deleted_at is not None and not include_deleted:
        raise NotFound(f"workflow instance {instance_id!r} was deleted")
    return record


def wait(
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


# -- the engines -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Engine:
    """What differs between the two kinds of instance, for the operations here."""

    project: Callable[[Sequence[EventRecord]], Projection]
    """The projection of a log (the fold; a DAG adds its node bookkeeping)."""
    cancel: Callable[[Store, str], InstanceRecord]
    """Cancel one instance (which must exist and be of this kind)."""
    created: Status
    """The status its ``WORKFLOW_CREATED`` gives it: a DAG runs from its start node on."""
    resumes_on_start: bool
    """Does a runner's start-up pass look at it? A state machine's step may be in doubt;
    a DAG's open node tasks are simply due work (an expired lease is a due task)."""


def engine(record: InstanceRecord) -> Engine:
    """The engine of ``record``'s kind."""
    return engine_of(record.kind, record.id)


def engine_of(kind: str, instance_id: str | None = None) -> Engine:
    """The engine of ``kind`` (``"machine"`` or ``"dag"``); InvalidState for another."""
    try:
        return _ENGINES[kind]
    except KeyError:
        of = "" if instance_id is None else f" of instance {instance_id}"
        raise InvalidState(f"unknown kind{of} {kind!r}") from None


def project(store: Store, record: InstanceRecord) -> Projection:
    """The fold of ``record``'s log by its kind's rules (what ``verify`` compares)."""
    events = once_more(lambda: store.events(record.id))  # a read
    return engine(record).project(events)


def cancel(store: Store, instance_id: str) -> InstanceRecord:
    """Cancel either kind: a state machine at once if no runner holds it, else at the
    running step's end; a DAG at once, with its running sub-workflows."""
    return engine(get(store, instance_id)).cancel(store, instance_id)


def cancel_unless_ended(store: Store, instance_id: str) -> InstanceRecord | None:
    """Cancel any instance unless it has already ended (a child of a cancelled DAG)."""
    record = store.get(instance_id)
    if record is None or record.status.terminal:
        return record
    try:
        return cancel(store, instance_id)
    except InvalidState:
        return store.get(instance_id)  # it ended meanwhile


# -- the state machine's operations ----------------------------------------------------
def _cancel_machine(store: Store, instance_id: str) -> InstanceRecord:
    def make(record: InstanceRecord, state: Projection, leased: bool) -> Decision:
        if record.status.terminal:
            raise InvalidState(f"instance {instance_id} is already {record.status}")
        if state.cancel_requested and leased:
            # Asked already; the runner holding it will end it at the step's end.
            return Decision((), state, decide.KeepTask())
        return decide.cancel(state, leased=leased)

    return operate(store, instance_id, make)


def resume(store: Store, instance_id: str) -> InstanceRecord:
    """Resume a STALLED state machine now instead of on its own schedule."""

    def make(record: InstanceRecord, state: Projection, leased: bool) -> Decision:
        if record.status != Status.STALLED:
            raise InvalidState(f"only a STALLED instance can be resumed; it is {record.status}")
        if leased:
            raise InvalidState(f"instance {instance_id} is being worked on right now")
        return decide.resume(state)

    return operate(store, instance_id, make)


def retry(store: Store, instance_id: str) -> InstanceRecord:
    """Run a FAILED state machine again from the step that failed."""

    def make(record: InstanceRecord, state: Projection, leased: bool) -> Decision:
        if record.status != Status.FAILED:
            raise InvalidState(f"only a FAILED instance can be retried; it is {record.status}")
        return decide.retry(state)

    return operate(store, instance_id, make)


def operate(
    store: Store,
    instance_id: str,
    make: Callable[[InstanceRecord, Projection, bool], Decision],
) -> InstanceRecord:
    """Commit ``make(record, state, leased)`` for a state machine, as an operator (no
    lease). ``make`` raises :class:`InvalidState` to refuse; no events means no write."""

    def attempt(_: int) -> InstanceRecord:
        record = get(store, instance_id)
        if record.kind == "dag":
            raise InvalidState(f"instance {instance_id} is a DAG instance: not supported")
        task = once_more(lambda: store.task(instance_id))  # a read
        # A leased task means a runner may be inside the step right now: only it knows
        # where the step stands, so a cancel asks it rather than ending the step under it.
        leased = task is not None and task.leased
        # The in-flight mark lives on the task, not the row: carried into the projection
        # so that a resumed or retried step still in doubt stays in doubt (its reconcile
        # hook is asked before it runs again).
        state = record.projection(in_flight=task is not None and task.in_flight)
        decision = make(record, state, leased)
        if not decision.events:
            return record
        try:
            store.apply(Commit(instance_id, record.version, decision, worker=None))
        except StoreUnavailable as exc:
            # The version decides. Not moved: the lost commit did not happen, and the
            # decision is made again on a fresh connection (the CAS makes a second apply
            # of a stale decision impossible). Moved, and the log ends with this
            # decision's events: it committed (or an identical decision won the CAS, the
            # same outcome). Otherwise say so rather than guess.
            if not exc.lost:
                raise
            now = get(store, instance_id)
            if now.version == record.version:
                raise ConcurrencyConflict(instance_id, record.version) from exc
            if _ends_with(store, instance_id, decision):
                return now
            raise
        return get(store, instance_id)

    return until_committed(attempt, gave_up=lambda: ConcurrencyConflict(instance_id, -1))


def _ends_with(store: Store, instance_id: str, decision: Decision) -> bool:
    """Does the instance's log end with ``decision``'s events?"""
    events = once_more(lambda: store.events(instance_id))  # a read
    tail = events[-len(decision.events) :]
    mine = [(str(e.event_type), e.node, e.attempt, e.payload) for e in decision.events]
    return [(e.event_type, e.node, e.attempt, e.payload) for e in tail] == mine


# -- the DAG's operations --------------------------------------------------------------
def _cancel_dag(store: Store, instance_id: str) -> InstanceRecord:
    """One commit makes it CANCELLED and removes every open node task; then each active
    child is cancelled. Cancelling a CANCELLED instance only finishes its children."""

    def attempt(_: int) -> None:
        snap = store.dag_snapshot(instance_id)
        if snap is None:
            raise NotFound(f"no workflow instance {instance_id!r}")
        record = snap.instance
        if record.status == Status.CANCELLED:
            return
        if record.status.terminal:
            raise InvalidState(f"instance {instance_id} is already {record.status}")
        # A node scheduled after this read adds an open slot and moves the version: the
        # CAS fails, and the next attempt cancels that slot too.
        decision = interpret.cancel(snap.open_slots)
        store.dag_apply(DagCommit(instance_id, record.version, decision, None))

    until_committed(attempt, gave_up=lambda: ConcurrencyConflict(instance_id, -1))
    # The children only once the parent is CANCELLED: a child created before that commit
    # is in this list, and one created after it is cancelled by the handler that started
    # it, which sees the cancel when it parks (DagExecutor._park).
    for child in store.children(instance_id):
        cancel_unless_ended(store, child.id)
    return get(store, instance_id)


_ENGINES: dict[str, Engine] = {
    "machine": Engine(fold, _cancel_machine, created=Status.PENDING, resumes_on_start=True),
    "dag": Engine(interpret.project, _cancel_dag, created=Status.RUNNING, resumes_on_start=False),
}
