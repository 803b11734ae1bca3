"""Decisions: given the spec, the projection and what just happened, what to write.

Pure functions. Each returns a :class:`Decision` — the events to append, the projection
they produce, and what happens to the instance's task — which a store applies in one
version-checked commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from ..definition.events import Ev, NewEvent
from ..definition.workflow import COMPLETED, ErrorClass, WorkflowSpec
from ..errors import (
    Fail,
    InputError,
    ProgressConflict,
    Retry,
    Stall,
    StepFailure,
    UndeclaredTransition,
    Waiting,
)
from .fold import Projection, apply_all
from .progress import merge_progress

ReconcileVerdict = Literal["unchanged", "rerun", "goto", "complete"]
"""What a reconcile hook may conclude about an in-doubt step."""


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """What a reconcile hook found, and the evidence that goes into the log.

    Defined with the decisions (re-exported by :mod:`statemachine_wf.runtime.context`): it is the
    input of :func:`reconciled`, a pure value, where the hook's context is a runtime
    object with a clock.
    """

    decision: ReconcileVerdict
    to: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    progress: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Continue:
    """Keep the lease and run ``node`` (its STEP_STARTED is among the events).

    ``failures`` carries the consecutive-failure count into the attempt: 0 after a
    success, the running count when a failed or in-doubt step is tried again.
    """

    node: str
    attempt: int
    failures: int = 0


@dataclass(frozen=True, slots=True)
class Reschedule:
    """Release the lease; the task is due again after ``delay`` seconds.

    ``in_doubt``: an attempt of ``node`` may have had its effect and no reconcile hook
    call has judged it yet (the hook itself failed). The task keeps its in-flight flag,
    so whoever claims it next asks the hook first; the step never simply runs again.

    ``tell``: other workers are told the task is due (a notification, a nudge). False
    for a worker that hands its task back to claim next itself, at a streak's end: its
    claim sees the task, and passes the baton if it takes something else.
    """

    node: str
    delay: float
    failures: int
    in_doubt: bool = False
    tell: bool = True


@dataclass(frozen=True, slots=True)
class Finish:
    """The instance is terminal: its task goes."""


@dataclass(frozen=True, slots=True)
class KeepTask:
    """No change to the task (a progress save, a cancel request)."""


@dataclass(frozen=True, slots=True)
class Park:
    """Release the lease; the step waits (``ctx.wait_for``, ``ctx.sleep``).

    The task is due at ``until`` (epoch seconds; None: no deadline) or, if earlier, at the
    due time of a pending signal that may concern the wait: one with a token, or an
    untokened one named ``name``, other than those this decision settles.
    """

    node: str
    until: float | None
    name: str | None
    failures: int = 0


TaskOp = Continue | Reschedule | Finish | KeepTask | Park


@dataclass(frozen=True, slots=True)
class Timer:
    """A timer row to insert: a signal of kind 'timer' due at ``due`` with ``token``."""

    token: str
    due: float


@dataclass(frozen=True, slots=True)
class SignalWrites:
    """What a decision does to ``wf_signals`` (in the same commit)."""

    settled: tuple[tuple[int, str], ...] = ()
    """``(signal id, new state)``: applied, stale or dead."""
    dead: tuple[tuple[dict[str, Any], str], ...] = ()
    """``(envelope, reason)`` rows for ``wf_dead_letters``."""
    timer: Timer | None = None

    def __bool__(self) -> bool:
        return bool(self.settled or self.dead or self.timer)


NO_SIGNALS = SignalWrites()


@dataclass(frozen=True, slots=True)
class Decision:
    events: tuple[NewEvent, ...]
    state: Projection
    task: TaskOp
    signals: SignalWrites = field(default=NO_SIGNALS)
    dead_letter: str | None = None
    """A reason: the store also writes a dead letter (the instance's start envelope), in
    the same commit. Poison, not a business outcome: retries exhausted, invalid input."""


def _decide(
    state: Projection, events: list[NewEvent], task: TaskOp, dead_letter: str | None = None
) -> Decision:
    if dead_letter is not None:
        events = [*events, NewEvent(Ev.DEAD_LETTERED, payload={"reason": dead_letter})]
    # The row the store writes is these events folded onto the state decided on, by the
    # same `apply` that replays the log: the projection equals the fold of the log by
    # construction, and `verify` can only find a difference if a store broke the CAS.
    return Decision(tuple(events), apply_all(state, events), task, dead_letter=dead_letter)


def _decide_after(
    after: Projection, events: list[NewEvent], more: list[NewEvent], task: TaskOp
) -> Decision:
    """As :func:`_decide` on ``events + more``, given ``after``: the state the decision
    is made on with ``events`` already applied (the fold is a left fold), so they are
    not applied twice."""
    return Decision((*events, *more), apply_all(after, more), task)


def start(state: Projection, step: str, *, failures: int = 0) -> Decision:
    """Write the intent of the next attempt of ``step`` (``failures`` so far carried on)."""
    attempt = state.next_attempt(step)
    return _decide(
        state, [NewEvent(Ev.STEP_STARTED, step, attempt)], Continue(step, attempt, failures)
    )


def _moved_on(
    state: Projection,
    events: list[NewEvent],
    target: str,
    *,
    hold: bool = True,
    failures: int = 0,
    tell: bool = True,
) -> Decision:
    """After events that leave the instance at ``target``: start it, cancel, or finish.

    With ``hold`` (the common case) the next step's intent is written in the same commit
    and the runner keeps its lease; without it (the runner is stopping, or the claim has
    run its streak) the step is handed back, due at once, with no intent written, and
    other workers told unless ``tell`` is False (:attr:`Reschedule.tell`).
    """
    # Decide on the state *after* this commit's own events: a cancel request folded in by
    # them (or already pending) must win over starting the next step.
    after = apply_all(state, events)
    if target == COMPLETED:
        return _decide_after(after, events, [NewEvent(Ev.COMPLETED)], Finish())
    if after.cancel_requested:
        return _decide_after(after, events, [NewEvent(Ev.CANCELLED)], Finish())
    if not hold:
        # No intent without a runner to act on it: STEP_STARTED written now would put
        # the next step in doubt for whoever claims it, though nothing ran.
        return _decide_after(after, events, [], Reschedule(target, 0.0, 0, tell=tell))
    # The next step's intent in the same commit as this step's outcome: the runner keeps
    # its lease and runs on without a claim, and a crash in between leaves it in doubt.
    attempt = after.next_attempt(target)
    return _decide_after(
        after,
        events,
        [NewEvent(Ev.STEP_STARTED, target, attempt)],
        Continue(target, attempt, failures),
    )


moved_on = _moved_on
"""Public name of :func:`_moved_on` for the other decision modules (waits)."""


def success(
    spec: WorkflowSpec,
    state: Projection,
    step: str,
    attempt: int,
    result: object,
    staged: Mapping[str, Any],
    *,
    hold: bool = True,
    tell: bool = True,
) -> Decision:
    """The action of ``step`` returned ``result`` having staged ``staged`` progress
    (``hold``, ``tell``: :func:`_moved_on`'s)."""
    targets = spec.step(step).targets
    target = result
    # A step with one declared target may return None; anything else must name a
    # declared target, or the step fails (not retried: the code, not the world, is wrong).
    if target is None and len(targets) == 1:
        target = next(iter(targets))
    if not isinstance(target, str) or target not in targets:
        allowed = sorted(targets)
        return failure(
            spec,
            state,
            step,
            attempt,
            Fail,
            UndeclaredTransition(step, result, allowed),
            failures=0,
        )
    delta: dict[str, Any] = {}
    if staged:  # most steps stage nothing: skip the model validation then
        try:
            merged = merge_progress(spec.progress_model, state.progress, staged)
        except (ProgressConflict, InputError, ValidationError) as exc:
            return failure(
                spec, state, step, attempt, Fail, Fail(str(exc), code="progress_conflict"), 0
            )
        # The log keeps only what this step changed, merged and validated: the fold adds
        # deltas, so a replay never depends on what the model looked like back then.
        delta = {k: merged[k] for k in staged}
    completed = NewEvent(Ev.STEP_COMPLETED, step, attempt, {"progress": delta, "to": target})
    return _moved_on(state, [completed], target, hold=hold, tell=tell)


def error_info(step: str, exc: BaseException, cls: ErrorClass) -> dict[str, Any]:
    """The error record kept on the event and, for STALLED/FAILED, on the instance."""
    code = exc.code if isinstance(exc, StepFailure) else type(exc).__name__
    return {
        "step": step,
        "code": code,
        "message": str(exc) or type(exc).__name__,
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "recoverable": cls is not Fail,
    }


def failure(
    spec: WorkflowSpec,
    state: Projection,
    step: str,
    attempt: int,
    cls: ErrorClass,
    exc: BaseException,
    failures: int,
    *,
    event: Ev = Ev.STEP_FAILED,
    in_doubt: bool = False,
) -> Decision:
    """The action of ``step`` failed with ``exc``, classified as ``cls``.

    ``failures`` is the count of consecutive failures of this step before this one.
    ``event`` is ``RECONCILE_FAILED`` when it was the reconcile hook of a step whose
    attempt had already ended that failed: the attempt's own outcome stays as logged.

    ``in_doubt``: it was the reconcile hook of an in-doubt attempt that failed (raised,
    stalled, snoozed). Nothing says whether that attempt's effect happened, so the step
    stays in doubt until a hook call succeeds: the event and the error say so
    (``"in_doubt": true``) and the task keeps its in-flight flag (``Reschedule.in_doubt``),
    so every later attempt, and a resume or retry by hand, asks the hook first.
    """
    # Waiting is not a failure: a lock held by another instance or a snooze. The attempt
    # is logged as waiting and the step tried again later, with the failure count kept.
    if isinstance(exc, Waiting):
        payload: dict[str, Any] = (
            {"lock": exc.key, "holder": exc.holder}
            if exc.key is not None
            else {"snooze": exc.recheck, "reason": exc.message}
        )
        if in_doubt:
            payload["in_doubt"] = True
        return _decide(
            state,
            [NewEvent(Ev.STEP_WAITING, step, attempt, payload)],
            Reschedule(step, exc.recheck, failures, in_doubt=in_doubt),
        )
    policy = spec.step(step).retry
    info = error_info(step, exc, cls)
    if in_doubt:
        info["in_doubt"] = True
    outcome: str
    dead_letter = None
    if cls is Retry:
        failures += 1
        # Exhausted retries end as the policy says (stall or fail) and leave a dead
        # letter in the same commit, so an operator sees it without reading the log.
        if policy.exhausted(failures):
            outcome = policy.on_exhausted
            info["message"] = f"retries exhausted after {failures} failures: {info['message']}"
            info["recoverable"] = outcome == "stall"
            dead_letter = f"step {step!r}: {info['message']}"
        else:
            outcome = "retry"
    elif cls is Stall:
        outcome = "stall"
    else:
        outcome = "fail"
    if outcome == "retry":
        delay = policy.delay(failures)
        task: TaskOp = Reschedule(step, delay, failures, in_doubt=in_doubt)
    elif outcome == "stall":
        # A stall rechecks on its own schedule and starts counting failures afresh: it
        # waits for the world to change, which is not this step failing again.
        retry_in = getattr(exc, "retry_in", None)
        delay = float(retry_in) if retry_in is not None else policy.stall_retry_after
        task = Reschedule(step, delay, 0, in_doubt=in_doubt)
    else:
        delay = 0.0
        task = Finish()
    payload = {
        "outcome": outcome,
        "retry_in": round(delay, 3),
        "failures": failures,
    }
    if in_doubt:
        payload["in_doubt"] = True
    return _decide(state, [NewEvent(event, step, attempt, payload, info)], task, dead_letter)


def invalid_input(
    spec: WorkflowSpec, state: Projection, step: str | None, reason: str, failures: int
) -> Decision:
    """The stored input no longer validates: FAILED and dead-lettered, in one commit.

    A run started from SQL has no step yet (``step`` None): the initial step's first
    attempt is started and failed, so the log says where it stopped.
    """
    fail = Fail(reason, code="invalid_input")
    if step is None:
        begun = start(state, spec.initial)
        failed = failure(spec, begun.state, spec.initial, 1, Fail, fail, 0)
        return _decide(state, [*begun.events, *failed.events[:1]], failed.task, reason)
    decision = failure(spec, state, step, state.attempts.get(step, 0), Fail, fail, failures)
    return _decide(state, list(decision.events), decision.task, reason)


def reconciled(
    spec: WorkflowSpec,
    state: Projection,
    step: str,
    attempt: int,
    rec: Reconciliation,
    *,
    in_doubt: bool,
    failures: int = 0,
) -> Decision:
    """A reconcile hook returned ``rec`` for ``step`` (attempt ``attempt``).

    ``failures`` is the step's consecutive-failure count, kept when the step runs again.
    """
    # The hook's verdict is data from user code: a goto to a step that does not exist
    # fails the instance with the reason instead of writing a transition nobody can run.
    if rec.decision == "goto" and rec.to not in spec.steps:
        return failure(
            spec,
            state,
            step,
            attempt,
            Fail,
            UndeclaredTransition(step, rec.to, list(spec.steps), by="reconcile"),
            0,
        )
    try:
        merged = merge_progress(spec.progress_model, state.progress, rec.progress)
    except (ProgressConflict, InputError, ValidationError) as exc:
        return failure(
            spec, state, step, attempt, Fail, Fail(str(exc), code="progress_conflict"), 0
        )
    delta = {k: merged[k] for k in rec.progress}
    payload: dict[str, Any] = {
        "decision": rec.decision,
        "evidence": dict(rec.evidence),
        "progress": delta,
        "in_doubt": in_doubt,
    }
    if rec.to is not None:
        payload["to"] = rec.to
    event = NewEvent(Ev.RECONCILED, step, attempt, payload)
    if rec.decision == "goto" and rec.to is not None:  # checked in spec.steps above
        return _moved_on(state, [event], rec.to)
    if rec.decision == "complete":
        return _moved_on(state, [event], COMPLETED)
    return _moved_on(state, [event], step, failures=failures)


def saved(state: Projection, step: str, attempt: int, delta: Mapping[str, Any]) -> Decision:
    """Progress recorded mid-step (already validated by the context)."""
    return _decide(
        state, [NewEvent(Ev.PROGRESS_SET, step, attempt, {"progress": dict(delta)})], KeepTask()
    )


def cancel(state: Projection, *, leased: bool) -> Decision:
    """Cancel now, or (while a runner holds the task) ask it to stop at the next boundary."""
    if leased:
        # A runner holds it and may be mid-action: only it knows where the step stands,
        # so ask; it stops at the next boundary (the request bumps the version, so its
        # commit loses the CAS and re-decides with the request folded in).
        return _decide(state, [NewEvent(Ev.CANCEL_REQUESTED)], KeepTask())
    return _decide(state, [NewEvent(Ev.CANCELLED)], Finish())


def stop_for_cancel(state: Projection) -> Decision:
    """A runner found a cancel request at a step boundary."""
    return _decide(state, [NewEvent(Ev.CANCELLED)], Finish())


def resume(state: Projection) -> Decision:
    """Resume a STALLED instance by hand: its step is due now (still in doubt if it was).

    A run started from SQL that never started a step has none: its task goes back to
    the sentinel step ``''``, which the claiming runner resolves.
    """
    return _decide(
        state,
        [NewEvent(Ev.RESUMED)],
        Reschedule(state.step or "", 0.0, 0, in_doubt=state.in_doubt),
    )


def retry(state: Projection) -> Decision:
    """Retry a FAILED instance by hand, at the step that failed (see :func:`resume`)."""
    return _decide(
        state,
        [NewEvent(Ev.RETRIED, payload={"step": state.step})],
        Reschedule(state.step or "", 0.0, 0, in_doubt=state.in_doubt),
    )
