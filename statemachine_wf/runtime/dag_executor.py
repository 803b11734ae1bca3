"""Running DAG node tasks: the I/O around the pure interpreter.

A runner that hosts DAGs hands each claimed node task (kind 'dag', slot = node id) to
:meth:`DagExecutor.run`. The claim already appended ``NODE_STARTED`` (the node's next
try). Then:

1. the context is folded from the log and the node's handler runs, outside any
   transaction;
2. one version-checked commit appends its result as ``NODE_COMPLETED`` for the node's
   run together with what follows from it: the ``NODE_DISPATCHED`` of the successors
   that became ready and are not dispatched yet, their tasks, this node's task deleted
   and the version bumped (or the instance completed when an end node finished). The
   decision is made on the runner's cached instance (its folded log, version and node
   tasks): read once, then kept current by folding in each of the runner's own commits
   at the seqs the store returns (``Store.dag_commit``), each made on the cached version,
   so its CAS vouches that nobody else committed in between. A loser of the CAS reads
   the log's tail and decides again; a duplicate delivery finds the result already there
   (in the view, or through the log's unique index, which fails the whole commit) and
   writes nothing. A node runs on the cache too when the cache is at least at the
   version its claim saw; else it reads the tail first.
3. A commit that dispatches exactly one node, due now, hands it to this worker (with a
   runner's ``lease``; :func:`~..core.dag_interpret.hand_off`); one that dispatches
   nothing takes another due node of the instance (a fan-out's next branch):
   :meth:`DagExecutor.run` returns its claim and the runner runs it next. With no other
   runner on the instance, a chain or fan-out node costs one commit and no read. After
   ``operations.STREAK`` such nodes in a row the next commit takes none, and the worker
   claims.

Completions of one instance that this runner's threads finish while one of them commits
go together, in one statement, when the runner has the instance to itself
(:mod:`.dag_group`: a fan-out's branches).

A node task whose run is already completed (a result recorded but not scheduled) is
only scheduled; a failure retries with backoff (the task is due again later) and then,
per node, follows the ``error`` handle or fails the instance (:mod:`.dag_failures`).

A ``delay`` node is a timer: its first try records ``NODE_WAITING`` with the time it is
due (``until``) and its task is rescheduled for then (lease released, no thread waits);
the try that runs when it is due completes it, and only then are its successors
dispatched. An internal error of the runtime (:class:`~.dag_handlers.InternalError`) is
retried whatever the node's policy says and, if it lasts, goes to the runner, which
quarantines the instance: it never FAILS it.

A ``sub_workflow`` node whose child is still running *parks* its task (``NODE_WAITING``,
lease released, due only after a long safety-net delay) and its thread goes back to
work. The child's finishing commit makes the task due again; the node then runs once
more, finds the child ended and completes (or fails) with it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic_core import PydanticSerializationError, to_jsonable_python

from ..core import dag_interpret as interpret
from ..core.dag_interpret import DagDecision, LogView, NodeOutcome, TaskRetry
from ..core.dag_vouch import blockers
from ..core.evolve import evolve
from ..core.store import Claim, DagCommit, DagSnapshot, Store
from ..definition.dag_models import Graph
from ..definition.events import Ev, NewEvent, Status
from ..definition.limits import check_payload
from ..errors import ConcurrencyConflict, LeaseLost
from . import dag_failures as failures
from . import handback, observe
from .dag_batch import BranchRuns
from .dag_cache import Cached, DagCache, Pending
from .dag_group import Grouper, free_of_others
from .dag_handlers import (
    ChildRunning,
    NodeCall,
    NodeResult,
    Registry,
    run_handler,
)
from .dag_keep import Keeper, work
from .dag_loops import iteration
from .operations import STREAK, cancel_unless_ended, until_committed

if TYPE_CHECKING:
    from ..definition.workflow import Workflow

log = logging.getLogger("statemachine_wf.dag")

CHILD_RECHECK = 300.0
"""Seconds a parked sub-workflow node waits before it looks at its child anyway: only a
safety net (the child's end wakes it at once), for a wake-up lost to a hand-edited row."""


class DagExecutor:
    """Runs claimed DAG node tasks for one runner.

    Args:
        store: the runner's store.
        registry: the functions and queries ``python``/``data_query`` nodes may call.
        worker: the runner's worker id (written on events, owner of leases).
        loop: returns the calling thread's asyncio loop (an async node function runs on it).
        lease: seconds of the lease on a node handed to this worker by its own commit (see
            the module's step 3); None: no hand-off, every node is claimed.
        incarnation: the runner's incarnation (the prefix of a handed task's lease token,
            which the runner's heartbeat extends).
    """

    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        worker: str,
        loop: Callable[[], asyncio.AbstractEventLoop],
        threads: int = 8,
        workflows: Mapping[str, type[Workflow[Any, Any]]] | None = None,
        observer: observe.Observer = observe.NOOP,
        lease: float | None = None,
        incarnation: str = "",
    ) -> None:
        self.observer = observer
        self._lease = lease
        self._incarnation = incarnation
        self.store = store
        self.registry = registry
        self.worker = worker
        self.workflows = dict(workflows or {})
        self._loop = loop
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, threads), thread_name_prefix="swf-dag-fn"
        )
        self._cache = DagCache(store)
        self._local = threading.local()  # per worker: the claim it took itself, its streak
        # How many of a commit's dispatched tasks this runner keeps (dag_keep.py).
        self._keeper = Keeper(threads, lambda: store.dag_sticky)
        self._group = (
            Grouper(
                self._cache,
                store,
                self._alone,
                worker=worker,
                lease=lease or 0.0,
                incarnation=incarnation,
                keeper=self._keeper,
            )
            if store.dag_group_most > 1
            else None
        )
        self._runs = BranchRuns(
            self._local,
            run=self._run,
            node=self.observer.node,
            group=self._group,
            unrun=lambda c: handback.unrun(store, worker, incarnation, c),
            free=lambda: self._free([]),
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- one node task ---------------------------------------------------------------------
    def run(self, claim: Claim) -> Claim | None:
        """Run one claimed node task (its span, metrics and log context around it); the
        claim of the next node when its commit handed one to this worker."""
        local = self._local
        # A node its own commit took for it (handed over, or the next branch) lengthens
        # this worker's streak; a claimed one starts a new streak.
        local.streak = (
            getattr(local, "streak", 0) + 1 if claim is getattr(local, "took", None) else 0
        )
        local.took = None
        with self.observer.node(claim):
            taken = self._run(claim)
        taken = self._runs.carry_on(taken)  # a run of branches it took, if any
        took = local.took = taken[0] if taken else None
        return took

    def _run(self, claim: Claim, batch: list[Pending] | None = None) -> list[Claim]:
        """One node task; what its commit took for this worker (several: a run of
        branches, :mod:`.dag_batch`). ``batch``: a run's queue, for a plain completion."""
        instance_id, node = claim.instance.id, claim.task.slot
        entry = self._cache.entry(instance_id)
        with entry.lock:
            # The cached instance runs the node with no read when it is at least as new as
            # the claim: the claim's version covers the dispatch of this node and every
            # result it may read, and the cache holds all that changed the version up to
            # its own (this runner's commits, folded in as they committed: _commit_loop).
            # Unless the claim's try is not the next one the cache knows of: somebody else
            # tried the node meanwhile (a claim bumps no version), and a runner that died
            # may have left more than its try (an older version recorded a result on its
            # own): read what the log says before running the node again.
            # Where other runners commit on the instance too (a fan-out's branches in
            # several processes), a cache older than the claim, or behind the log after a
            # vouched commit, still runs the first try of a run it holds dispatched: what
            # that run reads came before its dispatch. Its completion then commits on its
            # blockers' word, or is decided again on a read (_commit_loop). The instance's
            # status is the claim's, which is newer.
            snap = entry.state
            tried = 0 if entry.view is None else entry.view.tries.get(node, 0)
            status = None if snap is None else snap.instance.status
            older = snap is not None and snap.instance.version < claim.instance.version
            if (
                snap is None
                or claim.task.attempt > tried + 1
                or (
                    (older or entry.behind)
                    and not (entry.contended and entry.first_try(node, claim))
                )
            ):
                snap = self._cache.read(entry, instance_id)
                if snap is None:
                    return []  # deleted (a stopped test run): its tasks went with it
                status = snap.instance.status
            elif older:
                status = claim.instance.status
            view, graph = entry.view, entry.graph
            if view is None or graph is None or status is None:  # read() fills both
                raise RuntimeError(f"DAG instance {instance_id}: no log view after reading it")
            view.started(node, claim.task.attempt)  # the claim's NODE_STARTED, unread
            run = view.run(node)
            terminal = status.terminal
            done = view.completion(node, run) is not None
            ctx = {} if terminal or done else view.context()
            loop_state = None if terminal or done else iteration(graph, view, node, run)
            timer = None if terminal or done else view.timers.get((node, run))
        taken: list[Claim] = []
        if timer is not None:
            # A delay node's run whose timer was set: it completes once its time has come
            # (its task was due then), with what it computed when the timer was set. Due
            # sooner by this clock (clocks differ, a woken task): the same timer again.
            if time.time() < timer.until:
                self._wait(claim, run, timer.seconds, timer.until, timer.output)
            else:
                self.complete(
                    instance_id,
                    graph,
                    node,
                    run,
                    NodeResult(timer.output),
                    attempt=claim.task.attempt,
                    taken=taken,
                    batch=batch,
                )
            return taken
        if terminal or done:
            # Over (the task only goes), or a result recorded but never scheduled (by an
            # older version, which wrote the two in separate commits): schedule only.
            if done:
                log.info("instance %s: %s run %d already completed", instance_id, node, run)
            self.commit_loop(
                instance_id,
                lambda s, v: interpret.completed(
                    graph, v, node, run, status=s.instance.status, open_slots=s.open_slots
                ),
            )
            return []
        call = NodeCall(
            instance_id=instance_id,
            node=graph.nodes[node],
            config=graph.config(node),
            ctx=ctx,
            run=run,
            attempt=claim.task.attempt,
            registry=self.registry,
            pool=self._pool,
            loop=loop_state,
            store=self.store,
            workflows=self.workflows,
            cancelled=lambda: self._cancelled(instance_id),
        )
        try:
            began = time.monotonic()
            result = run_handler(call, self._loop)
            took = time.monotonic() - began
            self._local.node_seconds = took  # how long a run of branches may be (dag_batch)
            self._give_back_kept(work(graph, node), took)
            output = to_jsonable_python(result.output)
            # The limit inputs have: an output over it fails the node (PayloadTooLarge,
            # not retried) and is never written. (A start node's output is the input,
            # checked when the instance was started.)
            if call.node.type != "start":
                check_payload(f"node {node!r} output", output)
        except LeaseLost:
            raise
        except ChildRunning as wait:
            self._park(claim, run, wait.child_id)
            return []
        except (Exception, PydanticSerializationError) as exc:
            failures.failed(self, graph, claim, run, exc)
            return []
        if result.delay > 0:
            # A timer (the delay node): the run completes only when the time has come, so
            # nothing downstream -- a join made ready later by another branch included --
            # can run before. Its task sleeps until then; no thread waits.
            self._wait(claim, run, result.delay, time.time() + result.delay, output)
            return []
        self.complete(
            instance_id,
            graph,
            node,
            run,
            NodeResult(output, result.handle),
            attempt=claim.task.attempt,
            taken=taken,
            batch=batch,
        )
        observe.mark("completed")
        return taken

    def complete(
        self,
        instance_id: str,
        graph: Graph,
        node: str,
        run: int,
        result: NodeResult,
        *,
        attempt: int,
        error: bool = False,
        snap: DagSnapshot | None = None,
        taken: list[Claim] | None = None,
        batch: list[Pending] | None = None,
    ) -> bool:
        """Record ``node``'s run ``run`` as completed with ``result`` and schedule what
        follows, in one version-checked commit.

        Returns False (and writes nothing) when the result was already recorded (a
        duplicate delivery: the log's unique index, or the view, says so) or the
        instance has ended. ``snap``: a read of the instance to decide on first, instead
        of the cached one. ``taken``: where the claim of a node this commit hands to this
        worker goes (see the module's step 3); None: no hand-off. ``batch``: a run of
        branches (:mod:`.dag_batch`) the completion is queued on, not committed (True).
        """
        outcome = NodeOutcome(result.output, result.handle, result.delay, error)

        def decide(s: DagSnapshot, view: LogView) -> DagDecision | None:
            return interpret.node_finished(
                graph,
                view,
                node,
                run,
                outcome,
                attempt=attempt,
                status=s.instance.status,
                open_slots=s.open_slots,
            )

        if batch is not None and snap is None:
            batch.append(Pending(decide, free=False))
            return True
        entry = self._cache.entry(instance_id)
        if self._group is None or snap is not None or taken is None:
            committed = self.commit_loop(instance_id, decide, snap, taken)
        elif free_of_others(entry):
            # Nobody commits on the instance, nor waits to: alone, at once, under its lock
            # (a chain's nodes always).
            try:
                free, want = self._free(taken), self._runs.want()
                committed = self._commit_locked(entry, instance_id, decide, None, taken, free, want)
            finally:
                entry.lock.release()
        else:
            # Committed with the completions of this runner's other threads queued on the
            # instance meanwhile (runtime/dag_group.py).
            item = self._group.submit(instance_id, decide, self._free(taken), self._runs.want())
            if item.claim is not None:
                taken.append(item.claim)
                taken.extend(item.more)
            committed = item.result
        if not committed:
            log.info("instance %s: %s run %d result already recorded", instance_id, node, run)
            return False
        return True

    def _free(self, taken: list[Claim] | None) -> bool:
        """Whether the calling worker may take its next node in its commit: not past
        STREAK such nodes in a row (then its next node comes through a claim, in priority
        order, so that a long fan-out or chain does not keep a higher-priority task of
        another instance waiting to its end)."""
        return (
            taken is not None
            and self._lease is not None
            and getattr(self._local, "streak", 0) < STREAK
        )

    def _alone(self, entry: Cached, instance_id: str, item: Pending) -> None:
        """Commit a queued completion by itself (``Grouper``'s fallback), under the lock."""
        taken: list[Claim] = []
        item.result = self._commit_locked(
            entry, instance_id, item.make, None, taken, item.free, item.want
        )
        item.claim = taken[0] if taken else None
        item.more = taken[1:]
        item.done = True

    def _give_back_kept(self, work: str, seconds: float) -> None:
        """Measure a node's ``work``; give back to any runner what its first measure
        says this runner kept and cannot start in time (dag_keep.py). A hint: a failure
        is logged, and the tasks are anyone's once their while is over anyway."""
        for instance_id, keep in self._keeper.ran(work, seconds):
            try:
                self.store.dag_unkeep(instance_id, worker=self.worker, keep=keep)
            except Exception:
                log.warning("instance %s: kept tasks not given back", instance_id, exc_info=True)

    def _cancelled(self, instance_id: str) -> bool:
        record = self.store.get(instance_id)
        return record is None or record.status == Status.CANCELLED

    def _wait(self, claim: Claim, run: int, seconds: float, until: float, output: Any) -> None:
        """Set (or keep) ``run``'s timer: ``NODE_WAITING`` and the task due at ``until``."""
        instance_id, node = claim.instance.id, claim.task.slot
        left = max(0.0, until - time.time())

        def decide(snap: DagSnapshot, view: LogView) -> DagDecision | None:
            if snap.instance.status.terminal or view.settled(node, run):
                return None
            if node not in snap.open_slots:
                return None
            payload = {
                "run": run,
                "try": claim.task.attempt,
                "timer": seconds,
                "until": until,
                "output": output,
            }
            return DagDecision(
                events=(NewEvent(Ev.NODE_WAITING, node, None, payload),),
                retry=TaskRetry(node, left, claim.task.failures),
            )

        self.commit_loop(instance_id, decide)

    def _park(self, claim: Claim, run: int, child_id: str) -> None:
        """Wait for a sub-workflow's child without a thread: the task sleeps until woken."""
        instance_id, node = claim.instance.id, claim.task.slot

        def decide(snap: DagSnapshot, view: LogView) -> DagDecision | None:
            if snap.instance.status.terminal or view.settled(node, run):
                return None
            if node not in snap.open_slots:
                return None
            return DagDecision(
                events=(
                    NewEvent(
                        Ev.NODE_WAITING,
                        node,
                        None,
                        {"run": run, "try": claim.task.attempt, "child": child_id},
                    ),
                ),
                retry=TaskRetry(node, CHILD_RECHECK, claim.task.failures),
            )

        self.commit_loop(instance_id, decide)
        # The child may have ended while this task was still leased (its wake-up leaves a
        # leased task alone): look again now that the task is parked.
        child = self.store.get(child_id)
        if child is None or child.status.terminal:
            self.store.wake_parent(child_id)
        elif self._cancelled(instance_id):
            # Cancelled while we were starting the child: the cancel may have looked for
            # children before this one existed.
            cancel_unless_ended(self.store, child_id)

    def commit_loop(
        self,
        instance_id: str,
        make: Callable[[DagSnapshot, LogView], DagDecision | None],
        snap: DagSnapshot | None = None,
        taken: list[Claim] | None = None,
    ) -> bool:
        """Decide on the cached instance and commit, gated by the instance's version; True
        if a decision was committed, False if there was nothing to write.

        The cache is current for the version it holds: read from the store, or folded in
        from this runner's own commits as they commit, each made on that version (so its
        CAS vouches that nothing else changed it in between). So the first try decides on
        the cache with no read (on ``snap`` when one is given); a lost CAS means another
        runner committed, and the retry reads the log's tail after the cached view (one
        statement on PostgreSQL). The entry's lock serialises this runner's threads on
        one instance: they don't lose CAS races to each other.
        """
        entry = self._cache.entry(instance_id)
        with entry.lock:
            committed = self._commit_locked(
                entry, instance_id, make, snap, taken, self._free(taken)
            )
        return committed

    def _commit_locked(
        self,
        entry: Cached,
        instance_id: str,
        make: Callable[[DagSnapshot, LogView], DagDecision | None],
        snap: DagSnapshot | None,
        taken: list[Claim] | None,
        free: bool,
        want: int = 1,
    ) -> bool:
        """:meth:`commit_loop`'s commit, under ``entry.lock``; ``free``: whether the
        committing worker may take its next node in the commit (:meth:`_free`), and
        ``want`` due siblings of it at most (``BranchRuns.want``)."""

        def attempt(n: int) -> bool:
            state = (snap or entry.state) if n == 0 and entry.view is not None else None
            if state is None:
                # No cache yet, or a lost CAS: the version decided on is gone. Read
                # what the winner did and decide again on that.
                state = self._cache.read(entry, instance_id)
                if state is None:
                    return False
            view = entry.view
            if view is None:  # read() fills it
                raise RuntimeError(f"DAG instance {instance_id}: no log view after reading it")
            decision = make(state, view)
            if (
                entry.behind
                and state is entry.state
                and (decision is None or not entry.vouches(decision, state))
            ):
                # Decided on a cache behind the log: only a decision its blockers vouch
                # for may commit so. Anything else is decided again on a read.
                state = self._cache.read(entry, instance_id)
                if state is None:
                    return False
                decision = make(state, view)
            if decision is None:
                return False
            # A worker free to run a node next takes one in this commit, leased to it
            # there with no claim: the node it dispatches (a hand-off) or else another
            # due one (a fan-out's next branch); not past STREAK in a row (_free).
            handed = interpret.hand_off(decision) if free else None
            take: Literal["handed", "sibling"] | None = None
            if handed is not None:
                take = "handed"
            elif free and interpret.takes_sibling(decision):
                take = "sibling"
            decided = handed or decision
            # Once other runners commit on this instance too (a lost CAS, a version
            # found moved), a plain completion names the open tasks that vouch for it
            # and commits on their word (dag_vouch.blockers); alone, the plain CAS.
            graph = entry.graph
            vouch = (
                blockers(graph, view, decided, state.open_slots)
                if entry.contended and graph is not None
                else ()
            )
            version = state.instance.version
            commit = DagCommit(instance_id, version, decided, self.worker, vouch)
            keep, kept = self._keeper.for_commit(
                graph, decided, instance_id, handed=handed is not None
            )
            try:
                applied = self.store.dag_commit(
                    commit,
                    take=take,
                    lease=self._lease or 0.0,
                    incarnation=self._incarnation,
                    siblings=want if take == "sibling" else 1,
                    keep=keep,
                )
            except BaseException as exc:  # nothing written: the kept tasks given back
                self._keeper.give_back(kept)
                if isinstance(exc, ConcurrencyConflict):
                    entry.contended = True
                raise
            if decision.finish:  # takes no node: it neither hands one off nor a sibling
                self._cache.forget(instance_id)  # over: nothing left to decide
                return True
            if applied.version != version + 1 or entry.behind:
                entry.contended = True
                # Committed on a later version (its blockers vouched): the view lacks
                # others' events. Not folded in: the cache stays a prefix of the log,
                # behind it, and the next read folds in the tail, this commit's own
                # events with it, in order.
                entry.behind = entry.state is not None
                instance = evolve(state.instance, version=applied.version)
            else:
                instance = self._cache.fold(entry, state, decided, applied)
            if applied.task is not None and taken is not None:
                taken.append(Claim(applied.task, instance, started=True))
                taken.extend(Claim(t, instance, started=True) for t in applied.more)
            return True

        return until_committed(
            attempt,
            gave_up=lambda: LeaseLost(f"instance {instance_id} keeps changing under this runner"),
        )
