"""A single-threaded stepper: the runner's real pieces, one claim / one step / one commit.

The :class:`Stepper` drives one instance the way a :class:`~statemachine_wf.runtime.runner.Runner`
worker thread does — the store's claims and the public
:class:`~statemachine_wf.runtime.driver.MachineDriver`: ``begin`` (in-doubt handling and reconcile
hook), ``run_step`` (the action through the same ``StepContext``) and ``commit``
(version-checked decisions from :mod:`statemachine_wf.core.decide`) — but one tick at a time,
in the calling thread, so a test decides what happens between two writes.

A *crash* is a :class:`Crash` raised at a write boundary of the store: everything the
runner held in memory is dropped, exactly as after a SIGKILL, and the next tick is taken
by a fresh runner (a new worker id) once the dead one's lease has run out. Leases are
zero seconds long, and when nothing is due the stepper lets time pass with
``Store.wake_instances`` (a back-off, a stall or a snooze is over), so "later" is now.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel

from ..client.machine import Client
from ..core.decide import Decision
from ..core.store import Claim, Commit, InstanceRecord, Store
from ..definition.events import Ev, Status
from ..definition.workflow import Workflow
from ..errors import ConcurrencyConflict
from ..runtime.context import ReconcileContext, StepContext
from ..runtime.driver import Drive
from ..runtime.runner import Runner, RunnerOptions
from .strategies import Outcome, Proceed, Raise, Return

Boundary = Literal[
    "before_claim", "after_claim", "before_save", "after_save", "before_outcome", "after_outcome"
]
BOUNDARIES: tuple[Boundary, ...] = (
    "before_claim",
    "after_claim",
    "before_save",
    "after_save",
    "before_outcome",
    "after_outcome",
)
"""Where a crash can be injected: around the claim (and the intent it commits), around a
mid-step ``ctx.save``, and around the commit of the action's outcome (which, on success,
also carries the next step's intent)."""

OutcomeSource = Callable[[str, int], Outcome]


class Crash(BaseException):
    # A BaseException, so that neither the runner's nor an action's ``except Exception``
    # can swallow it.
    """A simulated SIGKILL: the process dies here, the store keeps what it committed."""


class _GhostStop(BaseException):
    """Ends a ghost run where the crash cut the lost attempt short."""


@dataclass(frozen=True, slots=True)
class Ghost(Outcome):
    """An attempt that a crash cut short, replayed for its effect on the world only.

    A reference run (no crash) meets the same world as the crashed run only if it
    repeats the attempts whose outcome the crash lost: their effects on the world
    (a poll counted, a request sent) stay even though the log kept nothing. A ghost runs
    the action with ``outcome`` up to where the crash struck (``stop``: before or after
    the ``saves``-th ``ctx.save``, or to its end), keeps what it saved, and drops its
    result; the next outcome of the step is then run for real.
    """

    outcome: Outcome
    stop: Literal["before_save", "after_save"] | None = None
    saves: int = 0


class _GhostHost:
    """The real step's host for a ghost run, stopping it where the crash struck."""

    def __init__(self, inner: Any, ghost: Ghost) -> None:
        self._inner = inner
        self._ghost = ghost
        self._saves = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def save_progress(self, delta: Mapping[str, Any]) -> None:
        self._saves += 1
        ghost = self._ghost
        if ghost.stop == "before_save" and self._saves > ghost.saves:
            raise _GhostStop
        self._inner.save_progress(delta)
        if ghost.stop == "after_save" and self._saves >= ghost.saves:
            raise _GhostStop


def _kind(decision: Decision) -> str:
    types = {e.event_type for e in decision.events}
    if Ev.PROGRESS_SET in types:
        return "save"
    if types <= {Ev.STEP_STARTED}:
        return "claim"
    return "outcome"


class FaultyStore:
    """A store proxy that crashes at one armed boundary and remembers the last commit."""

    def __init__(self, inner: Store, instance_id: Callable[[], str | None]) -> None:
        self.inner = inner
        self.dialect = inner.dialect
        self._instance_id = instance_id
        self.armed: Boundary | None = None
        self.fired: Boundary | None = None
        self.commits: list[Commit] = []
        """Every decision committed through this proxy (fast-start claims' intents included)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _at(self, kind: str, when: str) -> None:
        if self.armed == f"{when}_{kind}":
            self.fired, self.armed = self.armed, None
            raise Crash(self.fired)

    def claim(
        self, *, worker: str, types: Any, lease: float, limit: int = 1, incarnation: str = ""
    ) -> list[Claim]:
        before = self._before()
        self._at("claim", "before")
        claims = self.inner.claim(
            worker=worker, types=types, lease=lease, limit=limit, incarnation=incarnation
        )
        self._remember_claim(before, claims)
        if claims:
            self._at("claim", "after")
        return claims

    def claim_instance(
        self, instance_id: str, *, worker: str, lease: float, incarnation: str = ""
    ) -> Claim | None:
        self._at("claim", "before")
        claim = self.inner.claim_instance(
            instance_id, worker=worker, lease=lease, incarnation=incarnation
        )
        if claim is not None:
            self._at("claim", "after")
        return claim

    def apply(self, commit: Commit) -> int:
        kind = _kind(commit.decision)
        self._at(kind, "before")
        version = self.inner.apply(commit)
        if commit.decision.events:
            self.commits.append(commit)
        self._at(kind, "after")
        return version

    def _before(self) -> InstanceRecord | None:
        instance_id = self._instance_id()
        return None if instance_id is None else self.inner.get(instance_id)

    def _remember_claim(self, before: InstanceRecord | None, claims: list[Claim]) -> None:
        # A fast-start claim commits decide.start(); keep that decision for replays.
        from ..core import decide

        for claim in claims:
            if claim.started and before is not None and claim.instance.id == before.id:
                decision = decide.start(before.projection(in_flight=False), claim.task.node)
                self.commits.append(
                    Commit(before.id, before.version, decision, claim.task.lease_owner)
                )


_INSTRUMENTED: dict[type[Any], type[Any]] = {}


def instrument(workflow: type[Workflow[Any, Any]]) -> type[Workflow[Any, Any]]:
    """A subclass whose actions and reconcile hook report to the stepper that runs them.

    The stepper is injected as the ``_swf_stepper`` dependency; the author's methods run
    unchanged inside the wrappers.
    """
    cached = _INSTRUMENTED.get(workflow)
    if cached is not None:
        return cached
    spec = workflow.spec()
    ns: dict[str, Any] = {"__abstract__": True, "__module__": workflow.__module__}
    for sspec in spec.steps.values():
        ns[sspec.method] = _wrap_action(getattr(workflow, sspec.method), sspec.name, sspec.is_async)
    if spec.has_reconcile:
        name = workflow.__swf_reconcile_method__  # type: ignore[attr-defined]
        ns[name] = _wrap_reconcile(getattr(workflow, name))
    sub: type[Workflow[Any, Any]] = type(f"Instrumented{workflow.__name__}", (workflow,), ns)
    sub.__swf_spec__ = spec
    _INSTRUMENTED[workflow] = sub
    return sub


def _wrap_action(fn: Callable[..., Any], step: str, is_async: bool) -> Callable[..., Any]:
    if is_async:

        @functools.wraps(fn)
        async def run_async(self: Any, ctx: Any) -> Any:
            outcome = self._swf_stepper._outcome(step, ctx.attempt)
            while isinstance(outcome, Ghost):
                ghost_ctx = _ghost_context(ctx, outcome)
                with contextlib.suppress(Exception, _GhostStop):
                    if _runs(outcome.outcome):
                        await fn(self, ghost_ctx)
                ctx.keep_saved(ghost_ctx)
                outcome = self._swf_stepper._outcome(step, ctx.attempt)
            _raise_before(outcome)
            result = await fn(self, ctx) if _runs(outcome) else None
            return _after(outcome, result)

        return run_async

    @functools.wraps(fn)
    def run(self: Any, ctx: Any) -> Any:
        outcome = self._swf_stepper._outcome(step, ctx.attempt)
        while isinstance(outcome, Ghost):
            ghost_ctx = _ghost_context(ctx, outcome)
            with contextlib.suppress(Exception, _GhostStop):
                if _runs(outcome.outcome):
                    fn(self, ghost_ctx)
            ctx.keep_saved(ghost_ctx)
            outcome = self._swf_stepper._outcome(step, ctx.attempt)
        _raise_before(outcome)
        result = fn(self, ctx) if _runs(outcome) else None
        return _after(outcome, result)

    return run


def _runs(outcome: Outcome) -> bool:
    if isinstance(outcome, Raise):
        return outcome.after
    return not isinstance(outcome, Return) or outcome.run


def _ghost_context(ctx: StepContext[Any, Any], ghost: Ghost) -> StepContext[Any, Any]:
    """A fresh context on the same step, whose saves stop where the crash struck."""
    return ctx.replay(lambda host: _GhostHost(host, ghost))


def _raise_before(outcome: Outcome) -> None:
    if isinstance(outcome, Raise) and not outcome.after:
        raise outcome.exception()


def _after(outcome: Outcome, result: Any) -> Any:
    if isinstance(outcome, Raise):
        raise outcome.exception()
    if isinstance(outcome, Return):
        return outcome.value
    return result


def _wrap_reconcile(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(self: Any, ctx: ReconcileContext[Any, Any]) -> Any:
        stepper: Stepper = self._swf_stepper
        key = (ctx.step, ctx.attempt)
        outcome = stepper.reconcile_outcomes(ctx.step, ctx.attempt)
        try:
            _raise_before(outcome)
            result = fn(self, ctx)
            if inspect.iscoroutine(result):
                result = stepper._runner_loop().run_until_complete(result)
            if isinstance(outcome, Raise):
                raise outcome.exception()
        except Exception as exc:
            stepper.reconcile_raised[key] = exc
            raise
        stepper.reconcile_raised.pop(key, None)
        return result

    return run


@dataclass
class TickResult:
    """What one :meth:`Stepper.tick` did."""

    kind: Literal["idle", "begin", "step"]
    crashed: Boundary | None = None
    step: str | None = None
    attempt: int | None = None


@dataclass
class Stepper:
    """Drive one workflow instance on ``store`` one tick at a time.

    Args:
        workflow: the author's workflow class (run instrumented, see :func:`instrument`).
        store: a real store; the stepper wraps it in a :class:`FaultyStore`.
        dependencies: what each workflow object is constructed with (as in ``Runner``).
        outcomes: called as ``outcomes(step, attempt)`` each time an action runs.
        reconcile_outcomes: the same for the reconcile hook (``Return`` is ignored).
    """

    workflow: type[Workflow[Any, Any]]
    store: Store
    dependencies: Mapping[str, Any] = field(default_factory=dict)
    outcomes: OutcomeSource = field(default=lambda step, attempt: Proceed())
    reconcile_outcomes: OutcomeSource = field(default=lambda step, attempt: Proceed())
    """Called as ``reconcile_outcomes(step, attempt)`` each time the reconcile hook runs."""
    instance_id: str | None = None
    ran: dict[tuple[str, int], Outcome] = field(default_factory=dict)
    """The outcome used by the last run of each (step, attempt)."""
    reconcile_raised: dict[tuple[str, int], BaseException] = field(default_factory=dict)
    """What the last reconcile of an in-doubt (step, attempt) raised, if it raised."""
    lost: dict[tuple[str, int], Ghost] = field(default_factory=dict)
    """Attempts whose action ran but whose outcome a crash lost, as ghosts to replay."""

    def __post_init__(self) -> None:
        self.cls = instrument(self.workflow)
        self.spec = self.cls.spec()
        self.faulty = FaultyStore(self.store, lambda: self.instance_id)
        self.client = Client(self.store, [self.workflow])
        self.generation = itertools.count(1)
        self._runner: Runner | None = None
        self._drive: Drive | None = None
        self._input: BaseModel | None = None
        self.crashes = 0

    # -- lifecycle --------------------------------------------------------------------
    def start(self, input: BaseModel, *, instance_id: str | None = None) -> str:
        self.instance_id = self.client.start(self.workflow, input, instance_id=instance_id)
        return self.instance_id

    def close(self) -> None:
        self._abandon()

    def _runner_now(self) -> Runner:
        if self._runner is None:
            options = RunnerOptions(
                concurrency=1,
                worker_id=f"stepper-{next(self.generation)}",
                reconcile_on_start=False,
            )
            # The stepper drives each claim by hand and never starts the runner's threads:
            # a lease of 0 makes every commit's task due at once for its next claim. Not a
            # lease a running runner may have (RunnerOptions refuses it), hence set here.
            object.__setattr__(options, "lease", 0.0)
            self._runner = Runner(
                self.faulty,
                [self.cls],
                options=options,
                dependencies={**self.dependencies, "_swf_stepper": self},
            )
        return self._runner

    def _runner_loop(self) -> asyncio.AbstractEventLoop:
        return self._runner_now().driver.loop()

    def _abandon(self) -> None:
        """Drop everything in memory, like a killed process (resources are freed)."""
        runner, self._runner, self._drive = self._runner, None, None
        if runner is not None:
            runner.driver.close_loop()
            runner.driver.close(wait=True)

    def _outcome(self, step: str, attempt: int) -> Outcome:
        outcome = self.outcomes(step, attempt)
        self.ran[(step, attempt)] = outcome
        return outcome

    # -- reading ----------------------------------------------------------------------
    @property
    def record(self) -> InstanceRecord:
        if self.instance_id is None:
            raise RuntimeError("no instance started yet: call start() first")
        return self.client.get(self.instance_id)

    @property
    def holding(self) -> bool:
        """A runner holds the instance in memory and will run its step on the next tick."""
        return self._drive is not None

    @property
    def active(self) -> bool:
        return not self.record.status.terminal

    # -- driving ----------------------------------------------------------------------
    def tick(
        self, *, crash: Boundary | None = None, restart: bool = False, let_time_pass: bool = False
    ) -> TickResult:
        """One claim (unless held), then one begin or one step; crash at ``crash`` if reached.

        ``restart`` first kills the current runner and lets a new one take the instance
        through its start-up pass (``claim_instance`` and the reconcile hook);
        ``let_time_pass`` first makes whatever the instance waits for (a back-off, a stall,
        a snooze) run out.
        """
        if self.instance_id is None:
            raise RuntimeError("no instance started yet: call start() first")
        if restart:
            self._abandon()
        if let_time_pass and self._drive is None:
            self.store.wake_instances([self.instance_id])
        self.faulty.armed, self.faulty.fired = crash, None
        result = TickResult("idle")
        try:
            self._tick(result, startup=restart)
        except Crash:
            self.crashes += 1
            result.crashed = self.faulty.fired
            self._remember_lost(result)
            self._abandon()
        finally:
            self.faulty.armed = None
        return result

    def _remember_lost(self, result: TickResult) -> None:
        """The crash cut an action short (or lost its outcome): keep it as a ghost."""
        if result.kind != "step" or result.step is None or result.attempt is None:
            return
        key = (result.step, result.attempt)
        ran = self.ran.get(key)
        # Nothing lost when the action never ran, or when its outcome committed before the
        # crash (after_outcome): the log then holds what the action did.
        if ran is None or not _runs(ran) or result.crashed in ("after_outcome", None):
            return
        # The saves that committed before the crash: the ghost replays up to there, so its
        # effects on the world match what the lost attempt did.
        saves = sum(
            1
            for e in self.store.events(self.instance_id or "")
            if e.event_type == Ev.PROGRESS_SET and (e.node, e.attempt) == key
        )
        stop = result.crashed if result.crashed in ("before_save", "after_save") else None
        self.lost[key] = Ghost(ran, stop, saves)

    def _tick(self, result: TickResult, *, startup: bool) -> None:
        if self.instance_id is None:
            raise RuntimeError("no instance started yet: call start() first")
        runner = self._runner_now()
        if self._drive is None:
            claim = self._claim(runner, startup=startup)
            if claim is None:
                return
            d = Drive(
                instance=claim.instance,
                spec=self.spec,
                cls=self.cls,
                version=claim.instance.version,
                state=claim.instance.projection(in_flight=claim.task.in_flight),
                failures=claim.task.failures,
            )
            self._input = self.spec.input_model.model_validate(claim.instance.input)
            if not claim.started:
                result.kind = "begin"
                result.step = d.state.step
                self._drive = d
                holding = runner.driver.begin(d, claim, self._input, startup=startup)
                self._drive = d if holding else None
                return
            self._drive = d
        d = self._drive
        if self._input is None:
            raise RuntimeError("self._input is not set yet")
        if d.state.step is None:
            raise RuntimeError("d.state.step is not set yet")
        result.kind, result.step, result.attempt = "step", d.state.step, d.attempt
        go_on = runner.driver.run_step(d, self._input)
        if not go_on:
            self._drive = None

    def _claim(self, runner: Runner, *, startup: bool) -> Claim | None:
        if self.instance_id is None:
            raise RuntimeError("no instance started yet: call start() first")
        record = self.store.get(self.instance_id)
        if record is None or record.status.terminal:
            return None
        if startup and (
            record.status == Status.RUNNING
            or (record.status == Status.STALLED and self.spec.has_reconcile)
        ):
            # What Runner._queue_startup picks for the start-up pass.
            return self.faulty.claim_instance(self.instance_id, worker=runner.worker_id, lease=0.0)
        claims = self.faulty.claim(worker=runner.worker_id, types=runner.types, lease=0.0)
        if not claims:
            # Nothing due: a back-off, a stall or a snooze is running. Let its time pass.
            self.store.wake_instances([self.instance_id])
            claims = self.faulty.claim(worker=runner.worker_id, types=runner.types, lease=0.0)
        return claims[0] if claims else None

    def run_to_end(self, *, max_ticks: int = 200) -> InstanceRecord:
        """Tick without faults until the instance is terminal, idle, or ``max_ticks`` ran."""
        for _ in range(max_ticks):
            if not self.active:
                break
            if self.tick().kind == "idle" and not self.holding:
                break
        self._abandon()
        return self.record


def replay_refused(store: Store, commit: Commit, *, version: int | None = None) -> bool:
    """Apply ``commit`` again (at ``version`` if given); True if the store refused it."""
    again = commit if version is None else replace(commit, version=version)
    try:
        store.apply(again)
    except ConcurrencyConflict:
        return True
    return False
