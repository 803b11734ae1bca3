"""The roles of the store port: what each part of :class:`~statemachine_wf.core.store.Store` is for.

:class:`~statemachine_wf.core.store.Store` is the union of these protocols, so every ``Store``
annotation keeps meaning "all of it"; code that needs one part only may ask for that role
(a :class:`Locks`, a :class:`Signals`). Both shipped stores (``stores/sqlite.py``,
``stores/postgres.py``) implement every role; ``tests/contract/`` states each role's
contract once and runs it on both (the table in ``docs/architecture.md``, "The store's
roles").

The records the roles take and return live in :mod:`statemachine_wf.core.records`; this module
depends on nothing above the core (no store implementation, no runner).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from ..definition.events import EventRecord, NewEvent, Status
from .fold import Projection
from .records import (
    Claim,
    Claimant,
    Commit,
    DagApplied,
    DagCommit,
    DagSnapshot,
    InstanceRecord,
    LockRecord,
    NewDagInstance,
    NewInstance,
    TaskRecord,
    TypeKind,
)
from .waits import NewSignal, SignalRecord


class Lifecycle(Protocol):
    """The store object itself: its dialect, its schema, its connections."""

    # Consistency: ``migrate`` is idempotent (a second call applies nothing and returns the
    # same schema version); every other role assumes it ran.

    dialect: str

    def migrate(self, on_migration: Callable[[int, int], None] | None = None) -> int:
        """Apply pending migrations; return the schema version.

        ``on_migration(done, pending)`` is called before the first (``done`` 0) and after
        each migration applied, ``pending`` being how many this call applies (a progress
        bar's total)."""
        ...

    def close(self) -> None: ...


class InstanceLog(Protocol):
    """Instances and their append-only log: create, read, decide (``apply``), retire."""

    # Consistency: every write to an existing instance is one commit gated by the CAS on
    # ``wf_instances.version`` (``apply``; ``rebuild`` and ``quarantine`` bump it too, so a
    # decision made before them loses its CAS); a lost CAS raises ConcurrencyConflict and
    # writes nothing. The row equals the fold of the log (a Decision carries both). Creates
    # are idempotent on the idempotency key; events come back in seq order and a
    # once-per-attempt event is written at most once.

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

    def apply(self, commit: Commit) -> int:
        """Apply a decision; return the new version.

        Raises:
            ConcurrencyConflict: the instance is no longer at ``commit.version``.
        """
        ...

    def rebuild(self, instance_id: str, projection: Projection) -> None:
        """Overwrite the instance's projection (``statemachine-wf rebuild``)."""
        ...

    def soft_delete(self, instance_id: str) -> bool:
        """Mark a terminal instance deleted; False when it is not terminal or not there."""
        ...

    def purge_batch(self, *, older_than: float, batch_size: int, soft: bool = False) -> int:
        """Delete (or, ``soft``, mark deleted) up to ``batch_size`` terminal instances
        that finished more than ``older_than`` seconds ago, in one transaction; return
        how many. Active instances are never touched."""
        ...

    def quarantine(self, instance_id: str, *, reason: str, worker: str) -> None:
        """Set aside an instance whose row cannot be used: STALLED, dead-lettered, task parked."""
        ...


class TaskQueue(Protocol):
    """Runnable work and its leases: claim, extend, hand back, and wait or wake for it."""

    # Consistency: a lease is ``due_at`` pushed forward, so an expired lease is simply due
    # again. Every claim bumps the instance's version (fencing out the previous holder's
    # decisions) and takes a fresh ``lease_token``; ``heartbeat`` and ``release`` touch only
    # leases the caller still holds (``worker``, narrowed by ``incarnation`` or ``token``),
    # so a runner whose lease was taken over extends or releases nothing.

    def task(self, instance_id: str, slot: str = "") -> TaskRecord | None: ...

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

        The tasks of instances holding a lock come first, then the rest by priority and
        due time: a lock holder (a signer's slot) is never kept waiting by its waiters.

        ``incarnation`` (the claiming Runner object's) prefixes the claim's lease token.

        Rows that cannot be decoded are quarantined (STALLED, dead-lettered) and skipped.
        """
        ...

    def apply_and_claim(
        self, commit: Commit, *, types: Sequence[str], lease: float, incarnation: str = ""
    ) -> tuple[int, list[Claim]]:
        """``apply(commit)`` and, after it, ``claim`` of one task for ``commit.worker``: a
        worker whose instance ends takes its next one. The new version and the claims
        (empty when nothing was due). SQLite runs both in one transaction (one commit);
        PostgreSQL as two statements, each its own commit, which is cheaper there.

        Raises:
            ConcurrencyConflict: the instance is no longer at ``commit.version`` (nothing
                was written and nothing claimed).
        """
        ...

    def claim_instance(
        self, instance_id: str, *, worker: str, lease: float, incarnation: str = ""
    ) -> Claim | None:
        """Lease this instance's task if nobody holds it, without starting anything."""
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
        unrun: bool = False,
    ) -> None:
        """Give leases back: the tasks are due now, in-flight marks kept.

        ``instance_ids=None`` releases every lease of ``worker``: a runner restarted with a
        stable id does this for each dead incarnation of it before it starts, so its
        previous life's work is due now instead of after the lease runs out. ``token``:
        only a lease taken by the claim with that lease token (a hand-back);
        ``incarnation``: only the leases of that incarnation's claims. ``unrun`` (with
        ``token``): that claim started its step and no worker ran it, so the attempt is
        not in doubt: a state machine's gets a STEP_RELEASED and loses its in-flight mark.
        """
        ...

    def lease_incarnations(self, *, worker: str) -> list[str]:
        """The incarnations whose claims hold leases of ``worker`` that have not run out."""
        ...

    def active(self, *, types: Sequence[str] | None = None) -> list[InstanceRecord]:
        """RUNNING and STALLED instances (of these types), for start-up reconciliation."""
        ...

    def next_due(
        self,
        *,
        types: Sequence[str],
        dag_types: Sequence[str] | None = None,
        worker: str = "",
    ) -> float | None:
        """Seconds until the next task of these types is due (0 if one is due), or None.

        With ``dag_types``: state-machine tasks of ``types`` and DAG node tasks of
        ``dag_types`` only (what a runner's two claims take), not any task of a type. With
        ``worker`` (not ``""``), as that runner's claims see them: a DAG node task left to another
        runner for a while (PostgreSQL's ``dag_sticky``) is due once that while is over.
        """
        ...

    def wait_for_work(
        self, timeout: float, *, types: Sequence[str] = (), claimant: Claimant | None = None
    ) -> bool:
        """Block up to ``timeout`` seconds; True when woken because work may have arrived.

        ``types``: what the caller claims once awake. A start of one of them made by this
        process while the caller sleeps is handed to it, and other processes are not told
        of it (PostgreSQL): the caller must claim once woken. With ``claimant``, such a
        start may lease its task to the claimant in its own commit (its first step
        started, as a claim would): the caller must then run :meth:`handed_claim`'s claim.

        A wake-up rouses *one* waiting worker; a worker that then claims something passes
        the baton with :meth:`nudge`, so a burst is picked up by as many workers as it
        needs and a single new task costs a single claim.

        A thread's first call returns True at once, once the store watches other
        connections' commits (LISTEN, ``data_version``): what they made due before the
        watch was up was heard by nobody, so the caller looks again.
        """
        ...

    def handed_claim(self, claimant: Claimant, *, spare: bool = False) -> Claim | None:
        """A claim that a start of this process leased to ``claimant`` (see
        :meth:`wait_for_work`), or that :meth:`hand_over` gave it, once; None if there is
        none. Its lease runs from the commit that took it: a runner takes it after every
        wait, and releases what is left when it stops. ``spare``: only a claim that no
        waiting worker was woken for (its runner's workers were all busy), for a worker
        that did not wait: it takes it before it claims."""
        ...

    def starts_made(self) -> int:
        """How many starts were made through this store object so far. A runner whose
        process makes none gets its work from other processes (handed to its workers
        asleep, on PostgreSQL), and its instances' ends claim nothing then."""
        ...

    def hand_over(self, claimant: Claimant, claims: Sequence[Claim]) -> None:
        """Give ``claims``, which a claim of ``claimant``'s worker leased, to its workers
        waiting in :meth:`wait_for_work`: one claim wakes one of them, which runs it from
        :meth:`handed_claim`; a claim none is waiting for is run by the next of them to
        wait. A runner whose claim took tasks for its idle workers hands them so, instead
        of each of those workers claiming on its own."""
        ...

    def retire(self, claimant: Claimant) -> None:
        """``claimant``'s runner stops taking work: from now on no start of another
        process leases its task to it (PostgreSQL: a start due now that no worker of its
        own process takes is leased to a runner of another process with a worker asleep,
        and that process is told). Returns once every start leased to it before then is
        in :meth:`handed_claim` (for the runner to release), or after a few seconds."""
        ...

    def nudge(self, *, types: Sequence[str] | None = None, covered: bool = True) -> None:
        """Wake one waiting worker of this process, one that claims one of ``types`` if
        there is one (several runners on one store object sleep in one queue).

        With ``types`` (a claim saw another task of these types due: the baton), not while
        a claim of each of them is under way in this process: a claim sent after this
        call sees that task, so the wake-up waits until the claims under way have
        returned with none sent since, and is dropped if one was (PostgreSQL).
        ``covered=False``: a wake-up no claim covers (a runner's timer handed over to
        another of its workers), sent at once."""
        ...

    def wake_instances(self, instance_ids: Sequence[str]) -> None:
        """Make these instances' unleased tasks due now (a missed wake-up, made good)."""
        ...

    def wake(self) -> None:
        """Return every ``wait_for_work`` of this process now, and every thread's next one
        at once (shutdown; the store's watch reconnected, notifications may be lost)."""
        ...

    def wake_parent(self, child_id: str) -> None:
        """Make the parent's node task that waits for ``child_id`` due now, if unleased.

        A finishing child does this itself in its finishing commit; a parent node that
        parked itself calls it after re-reading a child that had already finished.
        """
        ...


class Locks(Protocol):
    """Durable locks owned by instances (the per-signer slot), with their waiters."""

    # Consistency: one holder per key; only the holder releases it (a release by another
    # instance changes nothing); a release makes the waiters' unleased tasks due. An
    # instance's locks also go in the commit that finishes it.

    def acquire_lock(self, key: str, instance_id: str) -> str:
        """Take the lock ``key`` for ``instance_id`` if free; return its holder either way.

        A caller that is not the holder is recorded as a waiter and woken on release.
        """
        ...

    def release_locks(self, instance_id: str, *, key: str | None = None) -> int:
        """Release ``key`` (or every lock) held by ``instance_id``; wake waiters."""
        ...

    def lock_holder(self, key: str) -> str | None: ...

    def locks(self, *, prefix: str = "") -> list[LockRecord]:
        """The held locks whose key starts with ``prefix`` (literally), by key, each with
        its live waiters; a read for operators (``statemachine-wf signers``)."""
        ...


class Signals(Protocol):
    """Signals and timers (``wf_signals``): rows that resume a waiting instance."""

    # Consistency: inserting a signal bumps the instance's version (a park committing
    # concurrently loses its CAS and re-decides). A row leaves ``pending`` once, in the
    # version-checked commit that applies it (``applied``), drops it (``stale``: a token of
    # an earlier wait), rejects it (``dead``) or ends the instance (``dead``/``void``).

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


class Inbox(Protocol):
    """What arrives from outside and what could not be processed: the type registry,
    dead letters and their redrive, and their retention."""

    # Consistency: a dead letter is written in the same commit as the decision that
    # causes it; ``mark_redriven`` succeeds once per letter; a type name is registered as
    # one kind only (TypeKindConflict, nothing written).

    def dead_letter(
        self, *, instance_id: str | None, envelope: dict[str, Any], reason: str, worker: str
    ) -> None: ...

    def dead_letters(self, *, limit: int = 100) -> list[dict[str, Any]]: ...

    def dead_letter_get(self, letter_id: int) -> dict[str, Any] | None: ...

    def mark_redriven(self, letter_id: int, *, instance_id: str | None, by: str) -> bool:
        """Mark a dead letter redriven (once); False when it already was."""
        ...

    def purge_dead_letters_batch(self, *, older_than: float, batch_size: int) -> int:
        """Delete up to ``batch_size`` dead letters written more than ``older_than``
        seconds ago, redriven or not, in one transaction; return how many."""
        ...

    def register_types(self, types: Sequence[str], *, by: str, kind: TypeKind = "machine") -> None:
        """Declare types a runner hosts (state machines: what a SQL producer may start).

        Raises:
            TypeKindConflict: a type is registered as the other kind; nothing is written.
        """
        ...

    def registered_types(self, kind: TypeKind = "machine") -> list[str]: ...


class DagRuns(Protocol):
    """DAG instances (kind 'dag', one task per open node), their definitions and children."""

    # Consistency: the same CAS on ``wf_instances.version`` as ``InstanceLog.apply``
    # (``dag_apply`` raises ConcurrencyConflict and writes nothing; ``dag_claim`` does not
    # bump the version). NODE_DISPATCHED/STARTED/COMPLETED/FAILED are written once per
    # (node, event type, run) (the log's unique index); saved definitions are immutable.

    dag_group_most: int
    """The most node completions of one instance one ``dag_commit`` carries (1: none
    together): a decision with ``also_done`` (``core.dag_group``)."""

    dag_sticky: float
    """Seconds the node tasks a ``dag_commit`` dispatches stay its runner's alone (0:
    anyone's at once; SQLite's is 0)."""

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

    def dag_commit(
        self,
        commit: DagCommit,
        *,
        take: Literal["handed", "sibling"] | None = None,
        lease: float = 0.0,
        incarnation: str = "",
        siblings: int = 1,
        keep: int | None = None,
    ) -> DagApplied:
        """``dag_apply``, returning also the seqs the decision's events took: what a
        runner needs to fold its own commit into its cached view of the log instead of
        reading it back. ``take`` leases a node task to ``commit.worker`` under a fresh
        token of ``incarnation`` in the same commit, so the committing worker runs that
        node next with no claim; ``DagApplied.task`` is it (None if there was none):

        - "handed": the one node task the decision dispatches, due now (a hand-off). The
          decision's last event must be that node's NODE_STARTED (the claim's intent).
        - "sibling": another node task of the instance that is due now (not one this
          commit dispatches), its try counted and its NODE_STARTED written, as
          ``dag_claim`` takes one.

        With ``commit.blockers`` the commit also holds on a later version, while the
        instance still runs, the node's own task is open and so is one of the blockers'
        (``dag_vouch.blockers``); ``DagApplied.version`` is then not
        ``commit.version + 1``, and the caller's view of the log lacks what came between.

        A group (``decision.also_done``: several completions decided in turn, merged by
        ``dag_group.merge``) deletes every completed node's task; with "sibling" it
        takes up to ``siblings`` other due tasks (one for each of the group's workers,
        or several for one worker's run of branches, each under a token of its own):
        the first is ``DagApplied.task``, the rest ``DagApplied.more``; a lone commit
        may take several too.

        Of the tasks the decision dispatches (none handed over), the first ``keep`` (None:
        all) stay ``commit.worker``'s alone for ``dag_sticky`` seconds after they fall due.

        Raises:
            ValueError: ``take`` is not allowed for the decision
                (``dag_interpret.hand_off`` / ``takes_sibling``), a group larger than
                ``dag_group_most``, or more siblings than that.
            ConcurrencyConflict: the instance is no longer at ``commit.version`` (and,
                with blockers, they no longer vouch for the decision).
        """
        ...

    def dag_unkeep(self, instance_id: str, *, worker: str, keep: int) -> int:
        """Leave kept only the first ``keep``, in dispatch order, of the node tasks of
        ``instance_id`` that ``worker``'s commits keep to it (``dag_commit(keep=)``) and
        nobody holds yet; those after them are any runner's at once (and other runners
        are told). The number given back (0 where nothing is kept: SQLite)."""
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

    def children(self, parent_id: str) -> list[InstanceRecord]:
        """The instances started with ``parent_id`` (a DAG's sub-workflows)."""
        ...


class LiveSubscription(Protocol):
    """One watcher of one instance, as :mod:`statemachine_wf.client.live` uses it."""

    event: asyncio.Event
    """Set (from any thread) when the instance's log may have grown; carries no data."""
    seen: int
    """The last seq the watcher has read; a wake-up at or below it may be skipped."""

    def close(self) -> None:
        """Stop watching (the store forgets the subscription)."""
        ...


class LiveFeed(Protocol):
    """What a store's live hub offers a watcher (``stores/_live.LiveHub`` is one)."""

    @property
    def active(self) -> bool:
        """Somebody is subscribed right now."""
        ...

    def subscribe(self, instance_id: str, loop: asyncio.AbstractEventLoop) -> LiveSubscription:
        """Register a watcher; blocks until notifications for it are being listened for."""
        ...


class LiveUpdates(Protocol):
    """Wake-ups for watchers of an instance's log (:func:`statemachine_wf.client.live.watch`)."""

    # Consistency: a wake-up carries no data and may be lost, merged or spurious; a watcher
    # subscribes before it reads and re-reads ``events(after_seq=last)`` on each wake-up,
    # which is complete because an instance's events commit in seq order.

    def live_hub(self) -> LiveFeed:
        """This store's watchers, woken when an instance's log grows (any process)."""
        ...
