"""The runner: resume on start-up, claim due work, hand each claim to its driver.

One runner is one process's worth of workers: ``concurrency`` threads, each with its own
database connection and its own asyncio loop for ``async def`` actions, so a blocking
action never stalls the other instances. A heartbeat thread keeps every lease this runner
holds alive; a dead runner simply stops extending them and its tasks fall due again.

The runner owns the pool, the claims (state-machine tasks of its types, DAG node tasks of
its ``dag_types``), the idle wait and its wake-ups, and the hand-back when the database
is away. Driving one claimed instance is the driver's job:
:class:`~statemachine_wf.runtime.driver.MachineDriver` for state machines (the step protocol),
:class:`~statemachine_wf.runtime.dag_executor.DagExecutor` for DAG nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..core.store import Claim, Claimant, Store, matches_prefix
from ..core.workers import as_worker
from ..definition.events import Status
from ..definition.options import RunnerOptions as RunnerOptions  # re-exported: users import it here
from ..definition.workflow import Workflow
from ..errors import (
    DataRejected,
    InvalidState,
    LeaseLost,
    MissingDependencies,
    StoreError,
    StoreUnavailable,
)
from . import handback, observe
from .driver import MachineDriver, NextClaim
from .idle import ALONE_ABOVE, EMPTY_WEIGHT, OWN_STARTS, PROBE, Idle, WorkerState
from .observe import NOOP, Observer
from .operations import engine
from .twins import release_dead_twins

if TYPE_CHECKING:
    from .dag_handlers import Registry

log = logging.getLogger("statemachine_wf.runner")


class Runner:
    """Runs hosted workflow types against a store.

    Args:
        store: where instances, the log and the tasks live.
        workflows: the workflow classes this runner hosts (several versions may coexist).
        options: see :class:`RunnerOptions`.
        dependencies: keyword arguments each workflow object is constructed with
            (clients, signers, …), so actions reach them through ``self``.
        dags: the functions and queries DAG nodes call; given, the runner also runs the
            node tasks of DAG instances of ``options.dag_types``.

    Raises:
        MissingDependencies: a hosted workflow declares a dependency (a class-level
            annotation without a value, ``bank: Bank``) that ``dependencies`` lacks;
            the error names each workflow and what it misses. Nothing is started.
    """

    def __init__(
        self,
        store: Store,
        workflows: Sequence[type[Workflow[Any, Any]]],
        *,
        options: RunnerOptions | None = None,
        dependencies: Mapping[str, Any] | None = None,
        dags: Registry | None = None,
        observer: Observer | None = None,
    ) -> None:
        # Traces always (a no-op without an OpenTelemetry SDK); metrics when the observer
        # has them, which also times the claims (a wrapped store): runtime/observe.py.
        self.observer = observer or NOOP
        store = self.observer.wrap_store(store)
        self.store = store
        self.opts = options or RunnerOptions()
        self.dependencies = dict(dependencies or {})
        # Every Runner object is its own incarnation (host:pid:random), the prefix of the
        # lease token of each claim it takes: two runners given the same worker id never
        # extend or release each other's leases (see :mod:`.twins`).
        self.incarnation = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.worker_id = self.opts.worker_id or self.incarnation
        self.classes: dict[str, type[Workflow[Any, Any]]] = {}
        for cls in workflows:
            self.classes[cls.spec().workflow_type] = cls
        self.types = tuple(
            t
            for t in sorted(self.classes)
            if not self.opts.prefixes or any(matches_prefix(t, p) for p in self.opts.prefixes)
        )
        missing = {
            t: sorted(self.classes[t].spec().dependencies - self.dependencies.keys())
            for t in self.types
        }
        if any(missing.values()):
            raise MissingDependencies({t: n for t, n in missing.items() if n}, [*self.dependencies])
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._startup: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._local = WorkerState()
        self._busy = 0
        self._busy_lock = threading.Lock()  # guards _busy, _given and _resting
        self._given: set[int] = set()  # tasks handed to idle workers, not yet taken
        self._resting = 0  # workers in _sleep
        self._idle = Idle(self.opts.idle_poll)  # which idle worker holds the timer
        self._drives, self._made, self._made_at, self._fused_empty = 0, 0, 0.0, 0.0
        self.driver = MachineDriver(
            store,
            worker_id=self.worker_id,
            lease=self.opts.lease,
            dependencies=self.dependencies,
            extend_leases=self._extend_leases,
            stopping=self._stopping,
            after_commit=self._deferred_nudge,
            threads=self.opts.concurrency,
            observer=self.observer,
        )
        """Drives each claimed state-machine instance (public: the testing helpers use it)."""
        self._take_next = NextClaim(self.types, self.opts.lease, self.incarnation)
        self.dag_types: tuple[str, ...] = ()
        self._hosted: tuple[str, ...] = self.types  # what an idle worker claims once woken
        # Whom a start of this process may lease its task to while a worker sleeps.
        self._claimant = Claimant(
            self.worker_id, self.opts.lease, self.incarnation, frozenset(self.types)
        )
        self._dag: Any = None
        self._drivers: dict[str, Callable[[Claim, bool], Claim | None]] = {
            "machine": self._drive_machine,
            "dag": self._drive_dag,
        }
        if dags is not None:
            from .dag_executor import DagExecutor

            self.dag_types = tuple(self.opts.dag_types)
            self._hosted = self.types + self.dag_types
            self._dag = DagExecutor(
                store,
                dags,
                worker=self.worker_id,
                loop=self._loop,
                threads=self.opts.concurrency,
                workflows=self.classes,
                observer=self.observer,
                lease=self.opts.lease,
                incarnation=self.incarnation,
            )

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        """Start the start-up pass, the workers and the heartbeat in background threads."""
        self.store.migrate()
        if self.types:  # what SQL producers may start (docs/architecture.md, "The inbox")
            self.store.register_types(self.types, by=self.worker_id)
        if self.dag_types:  # every type is one kind only; a DAG type no runner hosts is told
            self.store.register_types(self.dag_types, by=self.worker_id, kind="dag")
        if self.opts.worker_id is not None:
            release_dead_twins(self.store, self.opts.worker_id, self.incarnation)
        if self.opts.reconcile_on_start:
            self._queue_startup()
        for n in range(self.opts.concurrency):
            t = threading.Thread(target=as_worker(self._work), name=f"swf-worker-{n}", daemon=True)
            t.start()
            self._threads.append(t)
        hb = threading.Thread(target=self._heartbeat, name="swf-heartbeat", daemon=True)
        hb.start()
        self._threads.append(hb)
        workers, types = self.opts.concurrency, list(self.types)
        log.info("runner %s started: %d workers, types %s", self.worker_id, workers, types)

    def stop(self, timeout: float | None = 60.0) -> None:
        """Stop claiming, let running steps finish, hand back what is not started."""
        self._stopping.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            # Woken again at every slice: a worker that saw `_stopping` unset just before
            # the first wake-up and went to sleep after it would otherwise sleep on until
            # its safety poll (the store's wake-up reaches only the workers asleep).
            while t.is_alive():
                self.store.wake()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                t.join(0.1 if left is None else min(0.1, left))
        # No start leases to this runner any more; what one leased to a worker whose sleep
        # had just run out (or from another process, with every worker busy) goes back.
        self.store.retire(self._claimant)
        while (handed := self.store.handed_claim(self._claimant)) is not None:
            self._release_unrun(handed)
        self.driver.close()
        if self._dag is not None:
            self._dag.close()
        log.info("runner %s stopped", self.worker_id)

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Run until SIGTERM/SIGINT (or :meth:`stop` from another thread)."""
        if install_signal_handlers:

            def _graceful(signum: int, frame: FrameType | None) -> None:
                log.info("signal %d: stopping gracefully", signum)
                self._stopping.set()

            signal.signal(signal.SIGTERM, _graceful)
            signal.signal(signal.SIGINT, _graceful)
        self.start()
        while not self._stopping.wait(0.5):
            pass
        self.stop()

    def run_until_idle(self, *, timeout: float = 60.0, settle: float = 0.2) -> None:
        """Run until nothing of the hosted types is due within ``settle`` seconds.

        For scripts, examples and tests; a service uses :meth:`run`.
        """
        self.start()
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                due = self.store.next_due(types=self.types, dag_types=self.dag_types)
                with self._busy_lock:
                    busy = self._busy + len(self._given)
                if busy == 0 and self._startup.empty() and (due is None or due > settle):
                    time.sleep(settle)
                    due = self.store.next_due(types=self.types, dag_types=self.dag_types)
                    with self._busy_lock:
                        busy = self._busy + len(self._given)
                    if busy == 0 and (due is None or due > settle):
                        return
                time.sleep(0.01)
            raise TimeoutError(f"work still pending after {timeout} s")
        finally:
            self.stop()

    # -- threads ----------------------------------------------------------------------
    def _queue_startup(self) -> None:
        hosted = set(self.types)
        skipped: set[str] = set()
        for record in self.store.active():
            try:
                if not engine(record).resumes_on_start:
                    continue  # a DAG: its open node tasks are simply due work
            except InvalidState:
                # A kind nobody knows (refused by the database since migration 012, so
                # a row from before it): its claim quarantines it, with the reason.
                pass
            if record.type in hosted:
                # A STALLED instance keeps its own schedule unless its workflow can ask the
                # outside world whether the condition it waits for has changed.
                cls = self.classes[record.type]
                if record.status == Status.RUNNING or cls.spec().has_reconcile:
                    self._startup.put(record.id)
            elif record.type not in skipped:
                skipped.add(record.type)
                log.info(
                    "type %s is not hosted by this runner; its instances are left for one "
                    "that hosts it",
                    record.type,
                )

    def _heartbeat(self) -> None:
        """Extend our leases every lease/3 s, on a thread of its own.

        It needs the interpreter only for a moment per beat, and Python switches threads
        every few milliseconds even under a busy pure-Python action; what can starve it
        is one C call that holds the GIL for longer than the lease (a huge ``**``). Then
        the lease may lapse and another runner claim the instance: the late beat says so
        (WARNING), and the action's completion is refused by the claim's fence
        (LeaseLost, logged at WARNING with the instance id), never written twice.
        """
        interval = max(0.05, self.opts.lease / 3)
        last = time.monotonic()
        while not self._stopping.wait(interval):
            late = time.monotonic() - last
            if late >= self.opts.lease:
                log.warning(
                    "runner %s: heartbeat ran %.1f s after the last one (lease %.1f s): "
                    "leases may have lapsed; a step whose claim was taken over will not "
                    "be able to commit",
                    self.worker_id,
                    late,
                    self.opts.lease,
                )
            last = time.monotonic()
            try:
                self._extend_leases()
            except StoreUnavailable as exc:
                # The store logs the database going away and coming back, once each.
                log.debug("heartbeat failed (will retry): %s", exc)
            except Exception:
                log.exception("heartbeat failed (will retry)")

    def _extend_leases(self) -> int:
        return self.store.heartbeat(
            worker=self.worker_id,
            lease=self.opts.lease,
            log_every=self.opts.heartbeat_log_every,
            incarnation=self.incarnation,
        )

    def _work(self) -> None:
        while not self._stopping.is_set():
            try:
                if not self._startup.empty():
                    with self._busy_claiming():
                        try:
                            instance_id = self._startup.get_nowait()
                        except queue.Empty:
                            continue
                        claim = self.store.claim_instance(
                            instance_id,
                            worker=self.worker_id,
                            lease=self.opts.lease,
                            incarnation=self.incarnation,
                        )
                        if claim is not None:
                            self._run_handing(claim, startup=True)
                    continue
                # What was handed to this runner first: a start another process leased to
                # it as its last worker woke waits for no worker to sleep (_pgoffer.py).
                handed = self.store.handed_claim(self._claimant, spare=True)
                if handed is None:
                    asked, due = self._look_first()
                    claims: list[Claim] = []
                    if due is not None and due <= 0:
                        with self._busy_claiming():
                            if claims := self._claim():
                                self._hand_over(claims[1:])
                                self._pass_baton(claims)
                                self._run_handing(claims[0], startup=False)
                                self._deferred_nudge()  # if no commit passed it on
                            else:
                                asked, due = self._look_first(look=True)
                    if not claims:
                        wait = self._idle.wait(due, asked)
                        handed = self._sleep(wait) if wait > 0 else None
                while handed is not None:  # a start's, or handed over (_hand_over)
                    with self._busy_claiming():
                        self._taken(handed)
                        if self._stopping.is_set():
                            self._release_unrun(handed)
                        else:
                            self._run_handing(handed, startup=False)
                    handed = self.store.handed_claim(self._claimant)
            except StoreUnavailable as exc:
                log.debug("worker loop: %s (continuing)", exc)  # the store says it once
                self._stopping.wait(0.5)
            except Exception:
                log.exception("worker loop error (continuing)")
                self._stopping.wait(0.5)
        self.driver.close_loop()

    def _look_first(self, *, look: bool = False) -> tuple[float, float | None]:
        """When it was asked (monotonic) and what ``next_due`` says (as this runner's DAG claims
        see tasks: dag_sticky) if ``look`` or its last instance ended with no claim; else 0."""
        asked, look = time.monotonic(), look or self._local.look_first
        me = self.worker_id if self.dag_types else ""  # run_until_idle asks as any runner
        self._local.look_first = False
        if not look:
            return asked, 0.0
        return asked, self.store.next_due(types=self.types, dag_types=self.dag_types, worker=me)

    def _sleep(self, wait: float) -> Claim | None:
        """Sleep up to ``wait`` s, or the safety poll if displaced as the timer holder; a
        claim a start of this process leased to this runner meanwhile, if any."""
        # A worker asleep claims its types once woken: a start made here is handed to it
        # (store.wait_for_work's `types`), leased to it if a state machine's (`claimant`).
        hosted, claimant = self._hosted, self._claimant
        with self._busy_lock:
            self._resting += 1
        try:
            if self._idle.woke(self.store.wait_for_work(wait, types=hosted, claimant=claimant)):
                self.store.wait_for_work(self.opts.idle_poll, types=hosted, claimant=claimant)
        finally:
            with self._busy_lock:
                self._resting -= 1
        return self.store.handed_claim(claimant)

    def _hand_over(self, claims: Sequence[Claim]) -> None:
        """Give what a claim took for this runner's workers asleep to them: one claim
        statement for all of them, not one each (docs/architecture.md, "Claims for idle
        workers"). Work of this runner's until taken (``run_until_idle``)."""
        if claims:
            with self._busy_lock:
                self._given.update(claim.task.id for claim in claims)
            self.store.hand_over(self._claimant, claims)

    def _taken(self, claim: Claim) -> None:
        with self._busy_lock:
            self._given.discard(claim.task.id)

    def _claim(self) -> list[Claim]:
        """Due tasks for this worker: state-machine ones first, then DAG nodes."""
        claims = (
            self.store.claim(
                worker=self.worker_id,
                types=self.types,
                lease=self.opts.lease,
                incarnation=self.incarnation,
                limit=1 + self._resting,  # and one for each worker asleep (_hand_over)
            )
            if self.types and not self._skip_claim()  # DAG-only: no empty-list claim
            else []
        )
        if not claims and self.dag_types:
            claims = self.store.dag_claim(
                worker=self.worker_id,
                types=self.dag_types,
                lease=self.opts.lease,
                incarnation=self.incarnation,
            )
        return claims

    @contextlib.contextmanager
    def _busy_claiming(self) -> Iterator[None]:
        """Busy from before a claim until what it took has run: ``run_until_idle`` must
        not see an idle worker between a claim's commit and its run (the task is leased
        then, so it is not due either). A CI run saw it return there, a retry pending."""
        with self._busy_lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._busy_lock:
                self._busy -= 1

    def _pass_baton(self, claims: Sequence[Claim]) -> None:
        """There may be more where ``claims`` came from: wake one more worker. A resume
        left to a deliver commit (a signal; a timer the claim did not fire itself: it is
        then not ``started``) passes it after that commit instead, or the woken
        worker's claim and next_due would compete with that commit (docs/architecture.md,
        "Waking up"). Not when the claim saw nothing else due, unless this worker held the
        timer (another idle worker must take the timer over). The baton for more work is
        typed: a claim of those types under way in this process covers it."""
        held_timer = self._idle.handed_over()
        if not held_timer and not any(c.more for c in claims):
            pass
        elif all(not c.started and c.instance.waiting is not None for c in claims):
            self._local.nudge = True
        elif held_timer:
            # The timer is handed over: a wake-up no claim covers, for a worker of this
            # runner (the first sleeper may be another runner's, with a timer of its own).
            self.store.nudge(types=self._hosted, covered=False)
        else:
            dag = claims[0].task.kind == "dag"
            self.store.nudge(types=self.dag_types if dag else self.types)

    def _skip_claim(self) -> bool:
        """Whether the commit that ended this worker's last instance found nothing due."""
        skip, self._local.skip_claim = self._local.skip_claim, False
        return skip

    def _deferred_nudge(self) -> None:
        """Pass on the baton this worker's claim held back, if it still holds it."""
        if self._local.nudge:
            self._local.nudge = False
            self.store.nudge(types=self._hosted, covered=False)

    def _run_handing(self, claim: Claim, *, startup: bool) -> None:
        """Run ``claim``, then each node its commit handed straight to this worker (a DAG's
        next node in a chain: leased and started by that commit, no claim).

        Call inside ``_busy_claiming``: busy throughout (``run_until_idle`` must not see an
        idle worker between a commit and the node it handed over: that node is leased, so
        it is not due either).
        """
        handed = self._run_claim(claim, startup=startup)
        while handed is not None:
            if self._stopping.is_set():
                self._release_unrun(handed)
                return
            if (first := self.store.handed_claim(self._claimant, spare=True)) is not None:
                # A start leased to this runner (from another process, every worker busy)
                # goes before the next of a chain of claims, never starved by it: that
                # claim goes to a worker asleep, or to this one's next look.
                self._taken(first)
                self._hand_over([handed])
                handed = first
            handed = self._run_claim(handed, startup=False)

    def _release_unrun(self, claim: Claim) -> None:
        """Release ``claim``, handed to this runner as it stops (see :func:`.handback.unrun`)."""
        handback.unrun(self.store, self.worker_id, self.incarnation, claim)

    def _run_claim(self, claim: Claim, *, startup: bool) -> Claim | None:
        """Run one claim; the claim its commit handed to this worker next, if any."""
        context = observe.enter_claim(claim)  # every record of this claim names it
        try:
            # The kind picks the driver; a task whose kind differs from its instance's is
            # a row that lies about itself (written by hand): never run it.
            drive = self._drivers.get(claim.instance.kind)
            if drive is None or claim.task.kind != claim.instance.kind:
                self._cannot_run(claim)
            else:
                return drive(claim, startup)
        except LeaseLost as exc:
            self.observer.lease_lost()
            log.warning(
                "instance %s: lease lost, this runner's outcome was not committed: %s",
                claim.instance.id,
                exc,
            )
        except DataRejected as exc:
            # The instance's data, not the database: running it again would write the same
            # value again, forever. Set it aside (dead-lettered, with the reason).
            log.error("instance %s: the database refused its data: %s", claim.instance.id, exc)
            self.store.quarantine(
                claim.instance.id,
                reason=f"the database refused the instance's data: {exc}",
                worker=self.worker_id,
            )
        except StoreError as exc:
            # The database, not the instance, is the problem: never quarantine for it.
            log.log(
                logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.WARNING,
                "instance %s: store unavailable (%s); handing it back",
                claim.instance.id,
                exc,
            )
            self._hand_back(claim.instance.id, claim.task.lease_token)
        except Exception as exc:
            log.exception("instance %s: runner error; quarantining", claim.instance.id)
            self.store.quarantine(
                claim.instance.id, reason=f"runner error: {exc!r}", worker=self.worker_id
            )
        finally:
            observe.leave(context)
        return None

    def _hand_back(self, instance_id: str, token: str | None) -> None:
        """Release a claim abandoned for a store error (see :func:`.handback.abandoned`)."""
        claim = (instance_id, token)
        handback.abandoned(self.store, self.worker_id, self.incarnation, claim, self._stopping)

    # -- driving one instance ---------------------------------------------------------
    def _drive_machine(self, claim: Claim, startup: bool) -> Claim | None:
        cls = self.classes.get(claim.instance.type)
        if cls is None:
            # Claims filter on type, so this is a row that lies about itself (a DAG named
            # after a state machine, or written by hand): never run it.
            self._cannot_run(claim)
            return None
        # The commit that ends the instance claims this worker's next task, one commit for
        # two; not while start-up instances are queued (they go first: see _work). Nor
        # while most such claims find nothing and this process made no start for a while
        # (its work comes as starts other processes lease to its workers asleep): an
        # ending alone costs the server less than one with an empty claim, and the worker
        # asks next_due before it claims. (A process's own starts are left to a claim
        # under way: "A start held in its process", docs/architecture.md.)
        now, made = time.monotonic(), self.store.starts_made()
        if made != self._made:  # a start made here since the last look
            self._made, self._made_at = made, now
        self._drives += 1
        alone = now - self._made_at > OWN_STARTS and self._fused_empty > ALONE_ABOVE
        alone = alone and self._drives % PROBE != 0
        take = self._take_next if self._startup.empty() and not alone else None
        taken = self.driver.drive(claim, cls, startup=startup, take_next=take)
        self._local.look_first = alone
        if taken is None:
            return None
        self._fused_empty += (float(not taken) - self._fused_empty) * EMPTY_WEIGHT
        self._local.skip_claim = not taken  # it saw nothing due: no second claim at once
        self._pass_baton(taken)
        return taken[0] if taken else None

    def _drive_dag(self, claim: Claim, startup: bool) -> Claim | None:
        if self._dag is None or claim.instance.type not in self.dag_types:
            self._cannot_run(claim)
            return None
        handed: Claim | None = self._dag.run(claim)  # no start-up pass (see _queue_startup)
        return handed

    def _cannot_run(self, claim: Claim) -> None:
        inst = claim.instance
        reason = (
            f"this runner cannot run a {claim.task.kind} task of type {inst.type!r} "
            f"(instance kind {inst.kind!r}; hosted state machines: {list(self.types)}, "
            f"DAG types: {list(self.dag_types)})"
        )
        log.error("instance %s: %s; quarantined", inst.id, reason)
        self.store.quarantine(inst.id, reason=reason, worker=self.worker_id)

    def _loop(self) -> asyncio.AbstractEventLoop:
        """This worker thread's event loop (for ``async def`` actions and DAG handlers)."""
        return self.driver.loop()
