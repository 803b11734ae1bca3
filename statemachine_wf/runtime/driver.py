"""Driving one claimed state-machine instance: the step protocol, one claim at a time.

The :class:`~statemachine_wf.runtime.runner.Runner` owns the worker pool, the claims, the
wake-ups and the hand-back; for each state-machine claim a worker thread calls
:meth:`MachineDriver.drive`, which follows the step protocol of docs/architecture.md:

1. the claim commits the lease and the next attempt's ``STEP_STARTED`` together;
2. a step that was in flight when its last runner vanished is *in doubt*: the
   workflow's reconcile hook decides before anything runs again (:meth:`begin`);
3. the action runs outside any transaction, possibly saving progress mid-step;
4. its completion, the progress delta and the next step's intent commit together,
   version-checked (:meth:`commit`), and the driver goes straight on to that step
   (:meth:`run_step`).

Every decision is a pure call into :mod:`statemachine_wf.core.decide` (or :mod:`.waits`);
the driver only runs actions and hooks and commits what those calls decide. The testing
helpers (:mod:`statemachine_wf.testing`) call :meth:`begin` and :meth:`run_step` one at
a time to put crashes between two writes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ..core import decide, waits
from ..core.decide import Continue, Decision
from ..core.fold import Projection
from ..core.store import Claim, Commit, InstanceRecord, Store
from ..core.waits import SignalRecord
from ..definition.events import Ev, Status
from ..definition.limits import max_payload_bytes
from ..definition.workflow import ErrorClass, StepSpec, Workflow, WorkflowSpec
from ..errors import (
    Fail,
    LeaseLost,
    Parked,
    Retry,
    StepFailure,
    StoreUnavailable,
    Waiting,
)
from . import observe
from .context import ReconcileContext, Reconciliation, StepContext, Waker
from .operations import STREAK, until_committed

log = logging.getLogger("statemachine_wf.runner")


class _StepTimedOut(Exception):
    """The runner's deadline for a step (``@step(timeout=...)``) passed."""


async def _within(coro: Any, timeout: float) -> Any:
    """Await ``coro`` for at most ``timeout`` s; only the deadline raises _StepTimedOut."""
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task  # let it unwind, as asyncio.wait_for does
        raise _StepTimedOut
    return task.result()


class _Host:
    """The :class:`~statemachine_wf.runtime.context.StepHost` of one running step."""

    def __init__(self, driver: MachineDriver, drive: Drive) -> None:
        self._driver = driver
        self._drive = drive
        self.valid = True
        self.wake: Waker | None = None

    def waker(self) -> Waker:
        if self.wake is None:
            self.wake = Waker(self._driver.store, self._drive.instance.id)
        return self.wake

    def save_progress(self, delta: Mapping[str, Any]) -> None:
        if not self.valid:
            raise LeaseLost("this step has timed out or lost its lease; progress not saved")
        d = self._drive
        step, attempt = d.state.current_step(), d.attempt
        self._driver.commit(d, lambda state: decide.saved(state, step, attempt, delta))

    def heartbeat(self) -> None:
        self._driver.extend_leases()

    def cancel_requested(self) -> bool:
        record = self._driver.store.get(self._drive.instance.id)
        return record is not None and record.cancel_requested

    def acquire(self, key: str) -> str:
        if not self.valid:
            raise LeaseLost("this step has timed out or lost its lease")
        return self._driver.store.acquire_lock(key, self._drive.instance.id)

    def release(self, key: str) -> bool:
        return self._driver.store.release_locks(self._drive.instance.id, key=key) > 0

    def reserve_token(self, key: str, token: str) -> None:
        if not self.valid:
            raise LeaseLost("this step has timed out or lost its lease; token not recorded")
        d = self._drive
        step, attempt = d.state.current_step(), d.attempt
        self._driver.commit(d, lambda state: waits.reserve(state, step, attempt, key, token))


@dataclass(frozen=True)
class NextClaim:
    """The claim a worker makes in the commit that ends its instance (apply_and_claim)."""

    types: Sequence[str]
    lease: float
    incarnation: str


@dataclass
class Drive:
    """The mutable state of driving one instance (one thread, one lease)."""

    instance: InstanceRecord
    spec: WorkflowSpec
    cls: type[Workflow[Any, Any]]
    version: int
    state: Projection
    failures: int
    lease_token: str | None = None
    take_next: NextClaim | None = None
    taken: list[Claim] | None = None
    """What the commit that ended the instance claimed (``take_next``): None, none made."""
    steps: int = 0
    """Steps run on this claim so far (see ``operations.STREAK``)."""

    @property
    def attempt(self) -> int:
        return self.state.attempts.get(self.state.current_step(), 0)


class MachineDriver:
    """Drives claimed state-machine instances for one runner (any number of threads).

    Args:
        store: the store the claims came from.
        worker_id: the lease owner every commit is checked against.
        lease: seconds each commit extends the lease by.
        dependencies: keyword arguments each workflow object is constructed with.
        extend_leases: extends every lease the runner holds (``ctx.heartbeat()``).
        stopping: once set, a successful step hands its next step back instead of
            running it here (a stopping runner finishes what it runs, starts nothing new).
        after_commit: called after every successful commit (the runner passes on the
            wake-up baton its claim held back).
        threads: the most steps with a ``timeout`` running at once (their own threads).
    """

    def __init__(
        self,
        store: Store,
        *,
        worker_id: str,
        lease: float,
        dependencies: Mapping[str, Any],
        extend_leases: Callable[[], object] = lambda: None,
        stopping: threading.Event | None = None,
        after_commit: Callable[[], None] = lambda: None,
        threads: int = 1,
        observer: observe.Observer = observe.NOOP,
    ) -> None:
        self.observer = observer
        """Traces, metrics and log context of each step attempt (runtime/observe.py)."""
        self.store = store
        self.worker_id = worker_id
        self.lease = lease
        self.dependencies = dict(dependencies)
        self.extend_leases = extend_leases
        self._stopping = stopping or threading.Event()
        self._after_commit = after_commit
        self._local = threading.local()
        self._timeouts = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, threads), thread_name_prefix="swf-timed"
        )

    def close(self, *, wait: bool = False) -> None:
        """Stop the timed-step threads (each worker thread closes its loop: close_loop)."""
        self._timeouts.shutdown(wait=wait, cancel_futures=True)

    def close_loop(self) -> None:
        """Close the calling thread's event loop, if it has one."""
        loop: asyncio.AbstractEventLoop | None = getattr(self._local, "loop", None)
        if loop is not None:
            self._local.loop = None
            loop.close()

    def drive(
        self,
        claim: Claim,
        cls: type[Workflow[Any, Any]],
        *,
        startup: bool,
        take_next: NextClaim | None = None,
    ) -> list[Claim] | None:
        """Drive ``claim`` (an instance of ``cls``) until it waits, ends or is handed back.

        ``startup``: the claim comes from a runner's start-up pass, so a workflow with a
        reconcile hook is reconciled before anything runs (the step may be in doubt).
        ``take_next``: the commit that ends the instance also claims this worker's next
        task; the claims it made are returned (None when no such commit was made).
        """
        inst = claim.instance
        spec = cls.spec()
        d = Drive(
            instance=inst,
            spec=spec,
            cls=cls,
            version=inst.version,
            state=inst.projection(in_flight=claim.task.in_flight),
            failures=claim.task.failures,
            lease_token=claim.task.lease_token,
            take_next=take_next,
        )
        try:
            input_model = spec.input_model.model_validate(inst.input)
        except ValidationError as exc:
            # Poison: FAILED and dead-lettered (with the start envelope) in one commit.
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "input"
            reason = f"stored input does not validate: {where}: {first['msg']}"
            step = d.state.step
            self.commit(d, lambda s: decide.invalid_input(spec, s, step, reason, 0))
            return d.taken

        if d.state.step is not None and d.state.step not in spec.steps:
            # Poison: the log names a step this definition does not have (a workflow
            # changed without bumping its version). Set aside, never guessed at.
            self.store.quarantine(
                inst.id,
                reason=f"missing definition: {inst.type} has no step {d.state.step!r}",
                worker=self.worker_id,
            )
            return None
        if claim.started and claim.signals:  # the claim fired the wait's timer
            self.observer.delivered(inst, claim.signals)
        elif not claim.started and not self.begin(d, claim, input_model, startup=startup):
            return d.taken
        while self.run_step(d, input_model):
            pass
        return d.taken

    def begin(self, d: Drive, claim: Claim, input_model: BaseModel, *, startup: bool) -> bool:
        """Decide what a claim that did not start a step means; True to go on driving.

        The order is the claim's rules, most final first: an ended instance only loses
        its task, a pending cancel wins over running anything, then the sentinel step of
        an SQL start, a wake-up of a parked wait, and last a step to (re)start.
        """
        state = d.state
        spec = d.spec
        if state.status.terminal:
            # An ended instance that still has a task: remove the task, run nothing.
            self.commit(d, lambda s: Decision((), s, decide.Finish()))
            return False
        if state.cancel_requested:
            self.commit(d, decide.stop_for_cancel)
            return False
        if state.step is None:
            # Started from SQL (the sentinel step): only the runner knows the initial step.
            initial = spec.initial
            self.commit(d, lambda s: decide.start(s, initial, failures=d.failures))
            return self._holding(d)
        if state.waiting is not None:  # woken by a signal or its timer (or spuriously)
            self._deliver(d, claim.signals)
            return self._holding(d)
        # In flight at the claim means the last attempt's outcome never committed (its
        # runner died or lost the lease mid-action): its effect may or may not have
        # happened. Only the outside world can say which, so the hook is asked first.
        # Without a hook the step runs again: the author declared it safe to repeat.
        in_doubt = claim.task.in_flight
        if spec.has_reconcile and (in_doubt or startup):
            reason = "in_doubt" if in_doubt else "startup"
            self._reconcile(d, input_model, reason=reason, in_doubt=in_doubt)
        else:
            step = state.step
            self.commit(d, lambda s: decide.start(s, step, failures=d.failures))
        return self._holding(d)

    def _deliver(self, d: Drive, read: Sequence[SignalRecord] | None) -> None:
        """Apply the due pending signals and timers of a waiting instance (waits.deliver).

        ``read``: the rows the claim read with it, if it did (one round trip fewer).
        """
        signals = self.store.pending_signals(d.instance.id) if read is None else list(read)
        hold = not self._stopping.is_set()
        limit = max_payload_bytes()

        def make(state: Projection) -> Decision:
            if state.cancel_requested:
                return decide.stop_for_cancel(state)
            if state.waiting is None:  # nothing to resume; hand the task back
                return Decision((), state, decide.Reschedule(str(state.step), 0.0, d.failures))
            return waits.deliver(d.spec, state, signals, max_payload=limit, hold=hold)

        decision = self.commit(d, make)
        self.observer.delivered(d.instance, signals)
        for e in decision.events:
            if e.event_type == Ev.STALE_SIGNAL_DROPPED:
                log.warning(
                    "instance %s: stale %s %s %r dropped (%s)",
                    d.instance.id,
                    e.payload.get("kind"),
                    e.payload.get("signal"),
                    e.payload.get("name"),
                    e.payload.get("reason"),
                )
            elif e.event_type == Ev.SIGNAL_REJECTED:
                log.warning(
                    "instance %s: signal %s %r dead-lettered: %s",
                    d.instance.id,
                    e.payload.get("signal"),
                    e.payload.get("name"),
                    e.payload.get("reason"),
                )

    def _reconcile(self, d: Drive, input_model: BaseModel, *, reason: str, in_doubt: bool) -> None:
        step, attempt = d.state.current_step(), d.attempt
        ctx: ReconcileContext[Any, Any] = ReconcileContext(
            instance_id=d.instance.id,
            workflow_type=d.spec.workflow_type,
            step=step,
            attempt=attempt,
            input=input_model,
            progress=d.spec.progress_model.model_validate(d.state.progress),
            in_doubt=in_doubt,
            reason=reason,
        )
        obj = d.cls(**self.dependencies)
        hook = getattr(obj, d.cls.__swf_reconcile_method__)  # type: ignore[attr-defined]
        try:
            rec = hook(ctx)
            if asyncio.iscoroutine(rec):
                rec = self.loop().run_until_complete(rec)
            if rec is None:
                rec = ReconcileContext.unchanged()
            if not isinstance(rec, Reconciliation):
                raise Fail(
                    f"reconcile returned {rec!r}, not a Reconciliation", code="bad_reconcile"
                )
        except Exception as exc:
            cls = d.spec.step(step).classify(exc)
            log.warning("instance %s: reconcile of %s raised %r", d.instance.id, step, exc)
            # An in-doubt attempt is still open: the hook's failure ends it, and the step
            # stays in doubt (decide.failure). Otherwise the attempt already has its outcome
            # in the log and the failure is the hook's own.
            event = Ev.STEP_FAILED if in_doubt else Ev.RECONCILE_FAILED
            self._fail(d, step, attempt, cls, exc, event=event, in_doubt=in_doubt)
            return
        log.info(
            "instance %s: reconciled %s (%s): %s %s",
            d.instance.id,
            step,
            reason,
            rec.decision,
            dict(rec.evidence),
        )
        self.commit(
            d,
            lambda s: decide.reconciled(
                d.spec, s, step, attempt, rec, in_doubt=in_doubt, failures=d.failures
            ),
        )

    def run_step(self, d: Drive, input_model: BaseModel) -> bool:
        """Run the current step's action and commit its outcome; True to run the next."""
        step = d.state.current_step()
        with self.observer.step(d.instance, step, d.attempt, d.state.attempts):
            return self._run_step(d, input_model)

    def _run_step(self, d: Drive, input_model: BaseModel) -> bool:
        host = _Host(self, d)
        try:
            return self._attempt(d, input_model, host)
        finally:
            # The outcome is committed (or never will be): a wake-up asked for meanwhile
            # (ctx.waker) can reach the task now that no lease of this attempt holds it.
            if host.wake is not None:
                host.wake.committed()

    def _attempt(self, d: Drive, input_model: BaseModel, host: _Host) -> bool:
        step = d.state.current_step()
        attempt = d.attempt
        sspec = d.spec.step(step)
        ctx: StepContext[Any, Any] = StepContext(
            instance_id=d.instance.id,
            workflow_type=d.spec.workflow_type,
            step=step,
            attempt=attempt,
            input=input_model,
            progress=d.state.progress,
            progress_model=d.spec.progress_model,
            host=host,
            reason="new" if attempt == 1 else "retry",
            waits=d.state.waits,
            signals=sspec.signals,
        )
        obj = d.cls(**self.dependencies)
        action = getattr(obj, sspec.method)
        try:
            result = self._call(action, ctx, sspec)
        except (LeaseLost, StoreUnavailable):
            # The database went away under ctx.save (or another store call of the step):
            # not the step's failure. The claim is handed back and the step, in doubt,
            # is reconciled or run again once the database is back.
            raise
        except Parked as exc:
            # A durable wait: the step is parked with its token and timer in one commit.
            parked = exc

            def park(state: Projection) -> Decision:
                if state.cancel_requested:
                    return decide.stop_for_cancel(state)
                return waits.park(state, step, attempt, parked, d.failures)

            self.commit(d, park)
            observe.mark("parked")
            return False
        except _StepTimedOut:
            # The action may still be running in its thread; it can no longer save.
            host.valid = False
            timeout = Retry(f"step {step!r} timed out after {sspec.timeout} s", code="timeout")
            if d.spec.has_reconcile:
                self._reconcile(d, input_model, reason="timeout", in_doubt=True)
                return self._holding(d)
            self.commit(
                d,
                lambda s: decide.failure(d.spec, s, step, attempt, Retry, timeout, d.failures),
            )
            observe.mark(observe.failure_outcome(d.state.status, Retry))
            return False
        except Exception as exc:
            cls: ErrorClass = sspec.classify(exc)
            if not isinstance(exc, StepFailure):
                log.info(
                    "instance %s: step %s raised %r -> %s", d.instance.id, step, exc, cls.__name__
                )
            self._fail(d, step, attempt, cls, exc)
            observe.mark(observe.failure_outcome(d.state.status, cls))
            if (
                isinstance(exc, Waiting)
                and exc.key is not None
                and self.store.lock_holder(exc.key) is None
            ):
                # The holder let go while we were still inside the action (its wake-up
                # skipped our leased task): wake ourselves rather than sleep to the recheck.
                self.store.wake_instances([d.instance.id])
            return False
        staged = ctx.staged
        # The next step runs on under this lease, unless the runner is stopping or this
        # claim has run its streak: then it is handed back, due at once, and claimed again
        # in priority order (by this worker, when nothing outranks it). Other workers are
        # told of it only when this one stops: at a streak's end its own claim comes next.
        d.steps += 1
        stopping = self._stopping.is_set()
        hold = not stopping and d.steps <= STREAK
        decision = self.commit(
            d,
            lambda s: decide.success(
                d.spec, s, step, attempt, result, staged, hold=hold, tell=stopping
            ),
        )
        observe.mark("completed")
        return isinstance(decision.task, Continue)

    def _fail(
        self,
        d: Drive,
        step: str,
        attempt: int,
        cls: ErrorClass,
        exc: BaseException,
        *,
        event: Ev = Ev.STEP_FAILED,
        in_doubt: bool = False,
    ) -> None:
        def make(state: Projection) -> Decision:
            return decide.failure(
                d.spec, state, step, attempt, cls, exc, d.failures, event=event, in_doubt=in_doubt
            )

        self.commit(d, make)

    @staticmethod
    def _holding(d: Drive) -> bool:
        """After a reconcile: is a step started and ours to run?"""
        return d.state.status == Status.RUNNING and d.state.in_flight

    def _call(self, action: Callable[..., Any], ctx: StepContext[Any, Any], sspec: StepSpec) -> Any:
        # Only the step's own deadline raises _StepTimedOut: a TimeoutError the action
        # raises (a socket timeout) is the action's error, classified like any other
        # (concurrent.futures.TimeoutError *is* TimeoutError since Python 3.11).
        if sspec.is_async:
            coro = action(ctx)
            if sspec.timeout is not None:
                return self.loop().run_until_complete(_within(coro, sspec.timeout))
            return self.loop().run_until_complete(coro)
        if sspec.timeout is not None:
            future = self._timeouts.submit(action, ctx)
            done, _ = concurrent.futures.wait([future], timeout=sspec.timeout)
            if not done:
                raise _StepTimedOut
            return future.result()
        return action(ctx)

    def loop(self) -> asyncio.AbstractEventLoop:
        loop: asyncio.AbstractEventLoop | None = getattr(self._local, "loop", None)
        if loop is None:
            loop = asyncio.new_event_loop()
            self._local.loop = loop
        return loop

    def commit(self, d: Drive, make: Callable[[Projection], Decision]) -> Decision:
        """Apply ``make(state)``; on a lost CAS re-read and re-decide while we hold the task.

        A lost CAS with our lease intact means an operator changed the instance (a cancel
        request); with the lease gone, another runner owns it now and we back off.
        """

        def attempt(n: int) -> Decision:
            if n > 0:
                self._refresh(d)  # the CAS was lost: decide again on what won
            decision = make(d.state)
            commit = Commit(
                d.instance.id, d.version, decision, self.worker_id, self.lease, d.state.status
            )
            nxt = None if self._stopping.is_set() else d.take_next  # stopping: take nothing
            if nxt is not None and isinstance(decision.task, decide.Finish):
                d.version, d.taken = self.store.apply_and_claim(
                    commit, types=nxt.types, lease=nxt.lease, incarnation=nxt.incarnation
                )
            else:
                d.version = self.store.apply(commit)
            d.state = decision.state
            if isinstance(decision.task, decide.Reschedule | Continue):
                d.failures = decision.task.failures
            self._after_commit()
            return decision

        return until_committed(
            attempt,
            gave_up=lambda: LeaseLost(f"instance {d.instance.id} keeps changing under this runner"),
        )

    def _refresh(self, d: Drive) -> None:
        """Re-read the instance after a lost CAS, if this claim still owns its task.

        The lease decides who may write: a lost CAS with our lease intact means an
        operator changed the instance (a cancel request) and we decide again on it; with
        the lease gone another runner owns it now, and whatever we were about to commit
        must not be (:class:`LeaseLost`).
        """
        task = self.store.task(d.instance.id)
        fresh = self.store.get(d.instance.id)
        if (
            task is None
            or fresh is None
            or task.lease_owner != self.worker_id
            # Same worker id is not enough: a newer claim (a restart under a stable id, or
            # our own other thread after the lease ran out) owns it now.
            or task.lease_token != d.lease_token
        ):
            raise LeaseLost(f"instance {d.instance.id} was taken over by another runner")
        d.version = fresh.version
        d.state = fresh.projection(in_flight=task.in_flight)
