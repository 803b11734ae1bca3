"""A hypothesis rule-based state machine that attacks one workflow class.

    class TestOrder(WorkflowStateMachine.for_workflow(Order, inputs=from_model(OrderInput))):
        pass

    TestOrderCase = TestOrder.TestCase

Rules: advance (the next claim / step, with outcomes drawn for the action and the
reconcile hook, half the time crashing at a write boundary), restart the runner
(start-up pass, reconcile hook), deliver a committed decision again. After every rule
the invariants hold (see :class:`Invariants`); at the end the crashed run is driven to
its end and must agree with an uncrashed run of the same action outcomes.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import typing
from collections import defaultdict, deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from pydantic import BaseModel

from ..core.store import InstanceRecord, Store
from ..definition.events import ONCE_PER_ATTEMPT, Ev, EventRecord, Status
from ..definition.workflow import Workflow, WorkflowSpec
from ..errors import Retry, Stall
from ..stores.sqlite import SQLiteStore
from .stepper import BOUNDARIES, Boundary, Stepper, replay_refused
from .strategies import Outcome, Proceed, Raise, Return, from_model, outcomes

StoreFactory = Callable[[str], Store]
DependencyFactory = Callable[[], Mapping[str, Any]]
FinalCheck = Callable[[Mapping[str, Any], InstanceRecord], None]

AUTHOR_BUG_CODES = frozenset(
    {"undeclared_transition", "progress_conflict", "bad_reconcile", "invalid_input"}
)
AUTHOR_BUG_TYPES = frozenset(
    {
        "statemachine_wf.errors.ProgressConflict",
        "statemachine_wf.errors.InputError",
        "pydantic_core._pydantic_core.ValidationError",
    }
)


INSTANCE_ID = "00000000-0000-4000-8000-00000000c0de"
"""Both the explored run and its reference use this id, so ids derived from it agree."""


CRASH_CHOICES: tuple[Boundary | None, ...] = (None,) * len(BOUNDARIES) + BOUNDARIES
"""Half the steps run clean (and shrink to clean), half crash at one boundary."""

ENDS_ATTEMPT = (Ev.STEP_COMPLETED, Ev.STEP_FAILED, Ev.STEP_WAITING)
"""The events that record what an attempt's action (or in-doubt reconcile) came to."""


class InvariantViolation(AssertionError):
    """The workflow or the runtime broke a guarantee; the message says which and where."""


def sqlite_store(path: str) -> Store:
    """The default store of an example: a fresh SQLite file (durability off: speed)."""
    return SQLiteStore(path, synchronous="OFF")


@dataclass(frozen=True)
class Config:
    """What :meth:`WorkflowStateMachine.for_workflow` was given."""

    workflow: type[Workflow[Any, Any]]
    inputs: st.SearchStrategy[BaseModel]
    outcomes: Mapping[str, st.SearchStrategy[Outcome]]
    default_outcome: st.SearchStrategy[Outcome]
    reconcile_outcome: st.SearchStrategy[Outcome]
    dependencies: DependencyFactory
    store: StoreFactory
    check: FinalCheck | None
    allow_codes: frozenset[str]
    max_ticks: int
    compare: bool


def _event_key(e: EventRecord) -> tuple[Any, ...]:
    return (e.seq, e.event_type, e.node, e.attempt, e.payload, e.error)


class Invariants:
    """The checks run after every rule, over what the store holds.

    * the log is append-only (what was seen before is a prefix of what is there now);
    * fold(log) == the stored projection (``Client.verify`` is empty);
    * only declared transitions: each STEP_COMPLETED's ``to`` is among its step's
      targets, each reconcile ``goto`` names a step, each STEP_STARTED a step;
    * attempts never repeat and each has at most one outcome, after its intent;
    * set-once progress: no event changes a field that already holds a value, and the
      stored progress only grows;
    * the input never changes; a terminal instance never changes again;
    * no STEP_FAILED from an author bug (undeclared target, progress conflict, …).
    """

    def __init__(self, spec: WorkflowSpec, expected_input: dict[str, Any], allow: frozenset[str]):
        self.spec = spec
        self.expected_input = expected_input
        self.allow = allow
        self.seen: list[tuple[Any, ...]] = []
        self.progress: dict[str, Any] = {}
        self.terminal: tuple[Status, int] | None = None
        self.version = -1

    def check(self, stepper: Stepper) -> None:
        if stepper.instance_id is None:
            raise RuntimeError("the stepper has no instance yet: call start() first")
        events = stepper.store.events(stepper.instance_id)
        record = stepper.record
        keys = [_event_key(e) for e in events]
        if keys[: len(self.seen)] != self.seen:
            raise InvariantViolation(f"the log was rewritten: had {self.seen}, now {keys}")
        self.seen = keys
        if record.version < self.version:
            raise InvariantViolation(f"version went back from {self.version} to {record.version}")
        self.version = record.version
        diff = stepper.client.verify(stepper.instance_id)
        if diff:
            raise InvariantViolation(f"fold(log) != stored row, as {{field: (row, log)}}: {diff}")
        if record.input != self.expected_input:
            raise InvariantViolation(f"input changed: {self.expected_input} -> {record.input}")
        self._check_log(events)
        for key, old in self.progress.items():
            if old is not None and record.progress.get(key) != old:
                raise InvariantViolation(
                    f"progress field {key!r} changed from {old!r} to {record.progress.get(key)!r}"
                )
        self.progress = dict(record.progress)
        if self.terminal is not None:
            status, count = self.terminal
            if record.status != status or len(events) != count:
                raise InvariantViolation(
                    f"terminal instance changed: was {status} with {count} events, now "
                    f"{record.status} with {len(events)}: {keys[count:]}"
                )
        elif record.status.terminal:
            self.terminal = (record.status, len(events))

    def _check_log(self, events: list[EventRecord]) -> None:
        steps = self.spec.steps
        progress: dict[str, Any] = {}
        started: dict[str, int] = {}
        ended: set[tuple[str | None, int | None]] = set()
        for e in events:
            where = f"event #{e.seq} {e.event_type}({e.node}, attempt {e.attempt})"
            if e.event_type == Ev.CREATED and e.payload.get("input") != self.expected_input:
                raise InvariantViolation(f"{where} holds another input: {e.payload}")
            if e.node is not None and e.node not in steps:
                raise InvariantViolation(f"{where} names an undeclared step")
            if e.event_type == Ev.STEP_STARTED:
                if e.node is None:
                    raise InvariantViolation(f"{where} names no step")
                if (e.attempt or 0) <= started.get(e.node, 0):
                    raise InvariantViolation(f"{where} reuses an attempt number")
                started[e.node] = e.attempt or 0
            if e.event_type in ENDS_ATTEMPT:
                if e.node is None or started.get(e.node) != e.attempt:
                    raise InvariantViolation(f"{where} ends an attempt that is not the latest")
                if (e.node, e.attempt) in ended:
                    raise InvariantViolation(f"{where}: this attempt already has an outcome")
                ended.add((e.node, e.attempt))
            if e.event_type == Ev.STEP_COMPLETED:
                if e.node is None:
                    raise InvariantViolation(f"{where} names no step")
                to = e.payload.get("to")
                if to not in steps[e.node].targets:
                    allowed = sorted(steps[e.node].targets)
                    raise InvariantViolation(
                        f"{where} moved to {to!r}; {e.node!r} declares {allowed}"
                    )
            if (
                e.event_type == Ev.RECONCILED
                and e.payload.get("decision") == "goto"
                and e.payload.get("to") not in steps
            ):
                raise InvariantViolation(f"{where} reconciled to unknown step {e.payload}")
            if e.event_type == Ev.STEP_FAILED and e.error is not None:
                code, kind = e.error.get("code"), e.error.get("type")
                if (code in AUTHOR_BUG_CODES or kind in AUTHOR_BUG_TYPES) and not (
                    {code, kind} & self.allow
                ):
                    raise InvariantViolation(
                        f"{where}: the workflow itself is at fault ({code}): {e.error['message']}"
                    )
            for key, value in e.payload.get("progress", {}).items():
                old = progress.get(key)
                if old is not None and old != value:
                    raise InvariantViolation(
                        f"{where} changed set-once progress {key!r} from {old!r} to {value!r}"
                    )
                progress[key] = value


class WorkflowStateMachine(RuleBasedStateMachine):
    """Explore one workflow under crashes, duplicate deliveries, retries and reruns.

    Do not subclass this directly: use :meth:`for_workflow`, then expose ``.TestCase``.
    """

    config: ClassVar[Config]
    __test__ = False  # the machine is not a test; its ``TestCase`` is

    @classmethod
    def for_workflow(
        cls,
        workflow: type[Workflow[Any, Any]],
        *,
        inputs: st.SearchStrategy[Any] | None = None,
        outcomes: Mapping[str, st.SearchStrategy[Outcome]] | None = None,
        default_outcome: st.SearchStrategy[Outcome] | None = None,
        reconcile_outcome: st.SearchStrategy[Outcome] | None = None,
        dependencies: DependencyFactory | None = None,
        store: StoreFactory = sqlite_store,
        check: FinalCheck | None = None,
        allow_codes: Collection[str] = (),
        max_ticks: int = 200,
        compare: bool = True,
        settings: Settings | None = None,
    ) -> type[WorkflowStateMachine]:
        """A state machine class for ``workflow``.

        Args:
            inputs: strategy of input models (default ``from_model`` of the input model).
            outcomes: per-step strategies of :class:`Outcome` (default ``default_outcome``).
            default_outcome: for steps not in ``outcomes`` (default ``outcomes()``:
                mostly Proceed, else Retry, Stall, Fail or RuntimeError, before or after).
            reconcile_outcome: for each run of the reconcile hook (default: mostly let it
                answer, else Retry, Stall or RuntimeError, before or after it looked).
            dependencies: called once per run (and once for the reference run) for the
                keyword arguments of the workflow objects: fakes of the outside world.
            store: opens a fresh store on the path it is given (default SQLite).
            check: called at the end as ``check(dependencies, record)`` for both the
                crashed and the reference run, e.g. "charged exactly once".
            allow_codes: STEP_FAILED error codes/types that are not author bugs here.
            max_ticks: bound on the final drive to a terminal state.
            compare: check the crashed run against an uncrashed one at the end.
            settings: hypothesis settings for ``TestCase`` (default: the current profile,
                with at most 30 rules per run).
        """
        spec = workflow.spec()
        unknown = sorted(set(outcomes or {}) - set(spec.steps))
        if unknown:
            raise ValueError(f"outcomes for unknown steps {unknown}; steps: {sorted(spec.steps)}")
        config = Config(
            workflow=workflow,
            inputs=inputs if inputs is not None else from_model(spec.input_model),
            outcomes=dict(outcomes or {}),
            default_outcome=default_outcome if default_outcome is not None else _outcomes(),
            reconcile_outcome=(
                reconcile_outcome if reconcile_outcome is not None else RECONCILE_OUTCOMES
            ),
            dependencies=dependencies or dict,
            store=store,
            check=check,
            allow_codes=frozenset(allow_codes),
            max_ticks=max_ticks,
            compare=compare,
        )
        machine = typing.cast(
            type[WorkflowStateMachine],
            type(f"{workflow.__name__}Machine", (cls,), {"config": config}),
        )
        machine.TestCase.settings = settings or Settings(
            stateful_step_count=min(Settings().stateful_step_count, 30)
        )
        return machine

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.mkdtemp(prefix="swf-prop-")
        self._stores: list[Store] = []
        self.stepper: Stepper | None = None
        self._checks: Invariants | None = None
        self.input: BaseModel | None = None
        self.deps: Mapping[str, Any] = {}

    # -- helpers ----------------------------------------------------------------------
    def _new_stepper(self, name: str, outcome_source: Callable[[str, int], Outcome]) -> Stepper:
        store = self.config.store(str(Path(self._dir) / f"{name}.db"))
        self._stores.append(store)
        deps = self.config.dependencies()
        return Stepper(self.config.workflow, store, dependencies=deps, outcomes=outcome_source)

    def _strategy(self, step: str) -> st.SearchStrategy[Outcome]:
        return self.config.outcomes.get(step, self.config.default_outcome)

    def _draw_from(self, data: st.DataObject) -> None:
        if self.stepper is None:
            raise RuntimeError("self.stepper is not set yet")
        self.stepper.outcomes = lambda step, attempt: data.draw(
            self._strategy(step), label=f"outcome of {step} attempt {attempt}"
        )
        self.stepper.reconcile_outcomes = lambda step, attempt: data.draw(
            self.config.reconcile_outcome, label=f"outcome of reconcile({step}, {attempt})"
        )

    @property
    def _active(self) -> bool:
        return self.stepper is not None and self.stepper.active

    # -- rules ------------------------------------------------------------------------
    @initialize(data=st.data())
    def start_instance(self, data: st.DataObject) -> None:
        self.input = data.draw(self.config.inputs, label="input")
        self.stepper = self._new_stepper("run", lambda step, attempt: Proceed())
        self.deps = self.stepper.dependencies
        self.stepper.start(self.input, instance_id=INSTANCE_ID)
        self._checks = Invariants(
            self.stepper.spec,
            self.stepper.record.input,
            self.config.allow_codes,
        )

    @precondition(lambda self: self._active)
    @rule(data=st.data())
    def advance(self, data: st.DataObject) -> None:
        """The next claim / begin / action + commit, with outcomes drawn for the action and
        the reconcile hook; with a drawn boundary, the process dies at that write boundary if the
        tick gets there (a step that never saves has no save boundary)."""
        if self.stepper is None:
            raise RuntimeError("self.stepper is not set yet")
        at = data.draw(st.sampled_from(CRASH_CHOICES), label="crash at")
        if self.stepper.holding and at in ("before_claim", "after_claim"):
            # A runner that holds the instance does not claim it again.
            at = "before_outcome" if at == "before_claim" else "after_outcome"
        self._draw_from(data)
        self.stepper.tick(crash=at)

    @precondition(lambda self: self._active)
    @rule(data=st.data(), backoff_over=st.booleans())
    def restart_runner(self, data: st.DataObject, backoff_over: bool) -> None:
        """Kill the runner between writes; a new one takes over through its start-up pass
        (``backoff_over``: after any back-off or stall of the instance has run out)."""
        if self.stepper is None:
            raise RuntimeError("self.stepper is not set yet")
        self._draw_from(data)
        self.stepper.tick(restart=True, let_time_pass=backoff_over)

    @precondition(lambda self: self.stepper is not None and bool(self.stepper.faulty.commits))
    @rule(data=st.data(), current_version=st.booleans())
    def deliver_again(self, data: st.DataObject, current_version: bool) -> None:
        """Apply a committed decision (the last one, or an older one) a second time: it
        must be refused, and change nothing, by the version check or (at the current
        version) by the unique index."""
        if self.stepper is None:
            raise RuntimeError("self.stepper is not set yet")
        commits = self.stepper.faulty.commits
        back = data.draw(st.integers(0, len(commits) - 1), label="decisions back")
        commit = commits[-1 - back]
        version: int | None = None
        if current_version:
            if not {e.event_type for e in commit.decision.events} & set(ONCE_PER_ATTEMPT):
                return  # only once-per-attempt events are guarded by the unique index
            version = self.stepper.record.version
        store = self.stepper.store
        if self.stepper.instance_id is None:
            raise RuntimeError("the stepper has no instance yet: call start() first")
        before = _snapshot(store, self.stepper.instance_id)
        refused = replay_refused(store, commit, version=version)
        after = _snapshot(store, self.stepper.instance_id)
        if not refused or before != after:
            what = "at the current version" if current_version else "at its old version"
            raise InvariantViolation(
                f"a duplicate delivery {what} was {'refused' if refused else 'accepted'} and "
                f"{'changed' if before != after else 'did not change'} the store: "
                f"{[e.event_type for e in commit.decision.events]}"
            )

    @invariant()
    def invariants_hold(self) -> None:
        if self.stepper is not None and self._checks is not None:
            self._checks.check(self.stepper)

    # -- the end ----------------------------------------------------------------------
    def teardown(self) -> None:
        try:
            if sys.exc_info()[1] is None and self.stepper is not None:
                self._finish()
        finally:
            if self.stepper is not None:
                self.stepper.close()
            for store in self._stores:
                store.close()
            shutil.rmtree(self._dir, ignore_errors=True)

    def _finish(self) -> None:
        """Drive to the end, then compare with an uncrashed run of the same outcomes."""
        stepper = self.stepper
        if stepper is None:
            raise RuntimeError("stepper is not set yet")
        if self._checks is None:
            raise RuntimeError("self._checks is not set yet")
        if self.input is None:
            raise RuntimeError("self.input is not set yet")
        stepper.outcomes = stepper.reconcile_outcomes = lambda step, attempt: Proceed()
        crashed = stepper.run_to_end(max_ticks=self.config.max_ticks)
        self._checks.check(stepper)
        if self.config.check is not None:
            self.config.check(stepper.dependencies, crashed)
        if not self.config.compare:
            return
        queues = committed_outcomes(stepper)
        reference = self._new_stepper("reference", _replaying(queues))
        reference.start(self.input, instance_id=INSTANCE_ID)
        clean = reference.run_to_end(max_ticks=self.config.max_ticks)
        reference.close()
        if self.config.check is not None:
            self.config.check(reference.dependencies, clean)
        if not crashed.status.terminal and not clean.status.terminal:
            return  # neither ended within max_ticks: nothing to compare
        saved = {
            key
            for e in stepper.store.events(INSTANCE_ID)
            if e.event_type == Ev.PROGRESS_SET
            for key in e.payload.get("progress", {})
        }
        exempt = crash_dependent(self.config.workflow.spec().progress_model)
        diverged = divergence(crashed, clean, saved=saved, exempt=exempt)
        if diverged is not None:
            mine, theirs = diverged
            raise InvariantViolation(
                f"after {stepper.crashes} crash(es) the run ended {mine}, but an uncrashed run "
                f"of the same outcomes ended {theirs}; outcomes replayed: "
                f"{ {k: list(v) for k, v in committed_outcomes(stepper).items()} }"
            )


def crash_dependent(progress_model: type[BaseModel]) -> frozenset[str]:
    """The progress fields ``progress_model`` declares a crash may leave out or time
    differently (its ``crash_dependent`` class variable): records of a retry whose effect
    is harmless to repeat, such as a re-broadcast of recorded transaction bytes, written
    once it went out. The crashed and the uncrashed run are compared without them."""
    return frozenset(getattr(progress_model, "crash_dependent", ()))


def divergence(
    crashed: InstanceRecord,
    clean: InstanceRecord,
    *,
    saved: Collection[str],
    exempt: Collection[str] = (),
) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """How the crashed run's end differs from the uncrashed one's: (mine, theirs), or None.

    Progress saved mid-step (``saved``: the keys of its PROGRESS_SET events) by an attempt
    that a crash then cut short is kept on purpose (write-ahead); the uncrashed run never
    ran that attempt, so such fields may be extra in the crashed run. The ``exempt``
    fields (:func:`crash_dependent`) are not compared. Any other difference in the
    status, the progress or the error is a divergence.
    """
    extra = {k for k in crashed.progress.keys() - clean.progress.keys() if k in saved}
    mine_progress = {
        k: v for k, v in crashed.progress.items() if k not in extra and k not in exempt
    }
    their_progress = {k: v for k, v in clean.progress.items() if k not in exempt}
    mine = (crashed.status, mine_progress, _error_key(crashed))
    theirs = (clean.status, their_progress, _error_key(clean))
    return None if mine == theirs else (mine, theirs)


def _outcomes() -> st.SearchStrategy[Outcome]:
    return outcomes()


RECONCILE_OUTCOMES = outcomes(
    errors=(
        Retry("injected: node unreachable"),
        Stall("injected: no answer"),
        RuntimeError("boom"),
    ),
    failure_percent=20,
)


def _error_key(record: InstanceRecord) -> tuple[Any, ...] | None:
    if record.status != Status.FAILED or record.error is None:
        return None
    return (record.error.get("step"), record.error.get("code"))


def _snapshot(store: Store, instance_id: str) -> tuple[Any, ...]:
    record = store.get(instance_id)
    task = store.task(instance_id)
    events = [_event_key(e) for e in store.events(instance_id)]
    task_key = None if task is None else (task.node, task.attempt, task.in_flight, task.failures)
    return (record, task_key, events)


def committed_outcomes(stepper: Stepper) -> dict[str, deque[Outcome]]:
    """Per step, the outcomes whose effect the log kept, in order.

    An attempt whose outcome was committed contributes the outcome it ran with; an
    in-doubt attempt that a reconcile hook moved forward counts as a success (the hook
    found its effect); one the hook failed counts as that failure. An attempt whose
    action ran but whose outcome a crash lost, and that was then run again, contributes
    a :class:`~statemachine_wf.testing.stepper.Ghost`: the replay repeats its effect on
    the world and drops its result, as the crash did.
    """
    if stepper.instance_id is None:
        raise RuntimeError("the stepper has no instance yet: call start() first")
    queues: dict[str, deque[Outcome]] = defaultdict(deque)
    for e in stepper.store.events(stepper.instance_id):
        if e.node is None or e.attempt is None:
            continue
        key = (e.node, e.attempt)
        ghost = stepper.lost.get(key)
        if e.event_type == Ev.STEP_STARTED and ghost is not None:
            queues[e.node].append(ghost)
        elif e.event_type == Ev.STEP_FAILED and key in stepper.reconcile_raised:
            queues[e.node].append(Raise(stepper.reconcile_raised[key]))
        elif e.event_type in ENDS_ATTEMPT:
            queues[e.node].append(stepper.ran.get(key, Proceed()))
        elif e.event_type == Ev.RECONCILED and e.payload.get("decision") in ("goto", "complete"):
            ran = stepper.ran.get(key, Proceed())
            if ghost is not None and queues[e.node] and queues[e.node][-1] is ghost:
                # The hook found the lost attempt's effect: it stands for that run.
                queues[e.node].pop()
                ran = ghost.outcome
            queues[e.node].append(ran if isinstance(ran, Return) else Proceed())
    return queues


def _replaying(queues: Mapping[str, deque[Outcome]]) -> Callable[[str, int], Outcome]:
    pending = {k: deque(v) for k, v in queues.items()}

    def next_outcome(step: str, attempt: int) -> Outcome:
        queue = pending.get(step)
        return queue.popleft() if queue else Proceed()

    return next_outcome


def check_workflow(
    workflow: type[Workflow[Any, Any]],
    *,
    max_examples: int | None = None,
    settings: Settings | None = None,
    **options: Any,
) -> None:
    """Run the :class:`WorkflowStateMachine` of ``workflow`` now, as a plain test body.

    Takes the options of :meth:`WorkflowStateMachine.for_workflow`; raises the first
    (shrunk) violation found.
    """
    machine = WorkflowStateMachine.for_workflow(workflow, **options)
    base = settings or machine.TestCase.settings
    if max_examples is not None:
        base = Settings(base, max_examples=max_examples)
    run_state_machine_as_test(machine, settings=base)  # type: ignore[no-untyped-call,unused-ignore]


__all__ = [
    "AUTHOR_BUG_CODES",
    "Config",
    "InvariantViolation",
    "Invariants",
    "WorkflowStateMachine",
    "check_workflow",
    "committed_outcomes",
    "crash_dependent",
    "divergence",
    "sqlite_store",
]
