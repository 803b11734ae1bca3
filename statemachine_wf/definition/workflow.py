"""Definition time: the ``Workflow`` base class, the ``@step`` decorator and the frozen spec.

A workflow is a class. Each decorated method is one state's action; the decorator only
attaches a marker, and ``__init_subclass__`` collects the markers into a frozen
:class:`WorkflowSpec`, raising :class:`DefinitionError` with *every* problem it finds.

    class Order(Workflow[OrderInput, OrderProgress]):
        workflow_type = "shop.order.v1"

        @step(initial=True, to="ship")
        def charge(self, ctx: StepContext[OrderInput, OrderProgress]) -> str: ...

        @step(to=COMPLETED)
        async def ship(self, ctx): ...

Nothing here does I/O; the runtime reads the spec.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ValidationError

from ..errors import (
    DefinitionError,
    Fail,
    InputError,
    ProgressConflict,
    Retry,
    Stall,
    StepFailure,
    Waiting,
)
from .retry import DEFAULT_RETRY, RetryPolicy

COMPLETED = "COMPLETED"
"""The transition target that ends the workflow successfully."""

# The type name is how a stored instance finds its class again, so it carries a version:
# a change to the states ships as a new .vN beside the old class, and instances started
# on the old graph finish on it.
TYPE_PATTERN = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*\.v[0-9]+$")
STEP_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SIGNAL_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,99}$")
# A state named COMPLETED could never be entered (to=COMPLETED ends the workflow); the
# other statuses are kept out with it, so a step name never reads as a status.
RESERVED_STEPS = frozenset({COMPLETED, "FAILED", "STALLED", "CANCELLED", "PENDING", "RUNNING"})

InputT = TypeVar("InputT", bound=BaseModel)
ProgressT = TypeVar("ProgressT", bound=BaseModel)

ErrorClass = type[Retry] | type[Stall] | type[Fail] | type[Waiting]
ErrorMap = Mapping[type[BaseException], ErrorClass]


class NoProgress(BaseModel):
    """The progress model of a workflow that records none."""


@dataclass(frozen=True, slots=True)
class StepMarker:
    """What ``@step`` attaches to a method; read once by the class."""

    name: str | None
    initial: bool
    to: tuple[str, ...]
    retry: RetryPolicy | None
    errors: tuple[tuple[type[BaseException], ErrorClass], ...]
    timeout: float | None
    signals: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One state: its action and where it may go."""

    name: str
    method: str
    targets: frozenset[str]
    is_async: bool
    retry: RetryPolicy
    errors: tuple[tuple[type[BaseException], ErrorClass], ...]
    timeout: float | None
    signals: frozenset[str] = frozenset()
    """The signal names this step may wait for (``ctx.wait_for``)."""

    def classify(self, exc: BaseException) -> ErrorClass:
        """Map an exception to Retry, Stall or Fail (unmapped errors are retryable)."""
        # An action's own verdict (raising Retry, Stall, Fail, or waiting) wins over any
        # errors map: the author said what this failure is.
        if isinstance(exc, StepFailure):
            if isinstance(exc, Waiting):
                return Waiting
            if isinstance(exc, Fail):
                return Fail
            if isinstance(exc, Stall):
                return Stall
            return Retry
        # First match wins, step entries before the class's: list a subclass before
        # its base, or the base's class takes it.
        for exc_type, cls in self.errors:
            if isinstance(exc, exc_type):
                return cls
        if isinstance(exc, ProgressConflict | InputError | ValidationError):
            return Fail  # a bug in the action, not a transient failure: retrying cannot help
        return Retry


@dataclass(frozen=True, slots=True)
class WorkflowSpec:
    """The frozen, validated shape of a workflow class."""

    workflow_type: str
    initial: str
    steps: Mapping[str, StepSpec]
    input_model: type[BaseModel]
    progress_model: type[BaseModel]
    has_reconcile: bool
    doc: str = ""
    _order: tuple[str, ...] = field(default=())
    dependencies: frozenset[str] = frozenset()
    """The names the workflow object needs from ``Runner(..., dependencies=...)``: its
    class-level annotations without a value (``bank: Bank``), see :class:`Workflow`."""

    def step(self, name: str) -> StepSpec:
        return self.steps[name]

    @property
    def signal_names(self) -> frozenset[str]:
        """Every signal name some step declares: the names ``signal`` accepts."""
        return frozenset().union(*(s.signals for s in self.steps.values()))

    def mermaid(self) -> str:
        """The state graph as Mermaid ``stateDiagram-v2`` text."""
        lines = ["stateDiagram-v2", f"    [*] --> {self.initial}"]
        for name in self._order:
            for target in sorted(self.steps[name].targets):
                lines.append(f"    {name} --> {'[*]' if target == COMPLETED else target}")
        return "\n".join(lines) + "\n"


def step(
    *,
    initial: bool = False,
    to: str | Iterable[str] = (),
    name: str | None = None,
    retry: RetryPolicy | None = None,
    errors: ErrorMap | None = None,
    timeout: float | None = None,
    signals: str | Iterable[str] = (),
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a method as the action of one state.

    Args:
        initial: this is the state a new instance starts in (exactly one per class).
        to: the states this action may move to; ``COMPLETED`` ends the workflow.
        name: the state's name (default: the method's name).
        retry: the retry policy for this step (default: the class's ``retry_policy``).
        errors: exception type -> ``Retry`` / ``Stall`` / ``Fail``, checked in order,
            before the class-level ``errors`` map.
        timeout: seconds after which a running action is treated as timed out.
        signals: the signal names this step may wait for with ``ctx.wait_for``; the
            workflow accepts a signal whose name some step declares.

    The decorator only attaches a marker; the method itself is returned unchanged, so its
    signature and type survive.
    """
    # A str is an iterable too: without this, to="ship" would become ("s", "h", "i", "p").
    targets = (to,) if isinstance(to, str) else tuple(to)
    names = (signals,) if isinstance(signals, str) else tuple(signals)

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__swf_step__ = StepMarker(  # type: ignore[attr-defined]
            name=name,
            initial=initial,
            to=targets,
            retry=retry,
            errors=tuple((errors or {}).items()),
            timeout=timeout,
            signals=names,
        )
        return fn

    return mark


def reconcile(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark the method that asks the outside world what really happened.

    It receives a :class:`~statemachine_wf.runtime.context.ReconcileContext` and returns a
    :class:`~statemachine_wf.runtime.context.Reconciliation` (``ctx.unchanged()``,
    ``ctx.rerun()``, ``ctx.goto(step)``, ``ctx.complete()``) or raises ``Fail``/``Stall``.
    """
    fn.__swf_reconcile__ = True  # type: ignore[attr-defined]
    return fn


class Workflow(Generic[InputT, ProgressT]):
    """Base class of state-machine workflows.

    Subclass it with ``Workflow[InputModel, ProgressModel]``, set ``workflow_type`` to a
    versioned dotted name (``domain.action.vN``) and decorate one method per state with
    :func:`step`. The class is validated when it is defined.

    Instances are created by the runner (one per step) with the keyword arguments given to
    ``Runner(..., dependencies=...)``, so an action can reach injected clients through
    ``self``; keep no run state on ``self`` — it lives in ``ctx.progress``.

    Declare what the actions need as class-level annotations without a value::

        class Payout(Workflow[PayoutInput, PayoutProgress]):
            bank: Bank  # a dependency: the runner must be given "bank"
            retries: ClassVar[int] = 3  # not a dependency (ClassVar, and it has a value)

    Every such name (inherited ones included; ``ClassVar``, names with a value and names
    starting with ``_`` are not dependencies) is collected into ``spec().dependencies``,
    and a :class:`~statemachine_wf.runtime.runner.Runner` refuses to start without them.
    """

    workflow_type: ClassVar[str]
    retry_policy: ClassVar[RetryPolicy] = DEFAULT_RETRY
    errors: ClassVar[ErrorMap] = {}
    __swf_spec__: ClassVar[WorkflowSpec]

    def __init__(self, **dependencies: Any) -> None:
        for key, value in dependencies.items():
            setattr(self, key, value)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A shared base (helpers, no states of its own) is skipped. The flag is read from
        # the class's own __dict__, not inherited: its subclasses are still validated.
        if inspect.isabstract(cls) or cls.__dict__.get("__abstract__", False):
            return
        cls.__swf_spec__ = build_spec(cls)

    @classmethod
    def spec(cls) -> WorkflowSpec:
        """The validated spec of this workflow class."""
        return cls.__swf_spec__


def _models(cls: type) -> tuple[type[BaseModel] | None, type[BaseModel] | None]:
    for base in getattr(cls, "__orig_bases__", ()):
        origin = get_origin(base)
        if isinstance(origin, type) and issubclass(origin, Workflow):
            args = get_args(base)
            if len(args) == 2 and all(isinstance(a, type) for a in args):
                return args[0], args[1]
    # A subclass of a concrete workflow (class PayoutV2(Payout)) need not repeat the
    # parameters: it takes the models of the nearest validated parent.
    for parent in cls.__mro__[1:]:
        spec = parent.__dict__.get("__swf_spec__")
        if spec is not None:
            return spec.input_model, spec.progress_model
    return None, None


def build_spec(cls: type) -> WorkflowSpec:
    """Collect the step markers of ``cls`` into a :class:`WorkflowSpec` or raise.

    Every problem is collected before raising, so an author fixes them all at once.
    """
    problems: list[str] = []
    name = cls.__qualname__
    workflow_type = getattr(cls, "workflow_type", None)
    if not isinstance(workflow_type, str):
        problems.append("workflow_type is not set (a versioned name such as 'shop.order.v1')")
        workflow_type = "?"
    elif not TYPE_PATTERN.match(workflow_type):
        problems.append(
            f"workflow_type {workflow_type!r} is not a versioned dotted name "
            "such as 'shop.order.v1' (lowercase segments, ending in .vN)"
        )

    input_model, progress_model = _models(cls)
    if input_model is None or not issubclass(input_model, BaseModel):
        problems.append("no input model: subclass Workflow[InputModel, ProgressModel]")
        input_model = BaseModel
    if progress_model is None or not issubclass(progress_model, BaseModel):
        problems.append("no progress model: subclass Workflow[InputModel, ProgressModel]")
        progress_model = NoProgress
    else:
        for fname, finfo in progress_model.model_fields.items():
            if finfo.is_required():
                problems.append(
                    f"progress field {fname!r} is required; progress fields are set once "
                    "during the run, so each needs a default (usually None)"
                )

    markers: dict[str, tuple[str, StepMarker, Callable[..., Any]]] = {}
    has_reconcile = False
    # dir() includes inherited members, so a subclass keeps its parent's steps (a method
    # it redefines counts as written there). getattr_static runs no descriptor or property
    # at class creation; a staticmethod or classmethod is unwrapped to the marked function.
    for attr in dir(cls):
        member = inspect.getattr_static(cls, attr, None)
        fn = member.__func__ if isinstance(member, staticmethod | classmethod) else member
        if getattr(fn, "__swf_reconcile__", False):
            if has_reconcile:
                problems.append("more than one @reconcile method")
            has_reconcile = True
            # Kept by attribute name, so the runtime calls it on the runner-made instance.
            cls.__swf_reconcile_method__ = attr  # type: ignore[attr-defined]
        marker = getattr(fn, "__swf_step__", None)
        if isinstance(marker, StepMarker) and callable(fn):
            state = marker.name or attr
            if state in markers:
                problems.append(f"state {state!r} is declared twice ({markers[state][0]}, {attr})")
            markers[state] = (attr, marker, fn)

    if not markers:
        problems.append("no @step methods")

    initials = [s for s, (_, m, _) in markers.items() if m.initial]
    if not initials and markers:
        problems.append("no initial state: mark one step with @step(initial=True)")
    if len(initials) > 1:
        problems.append(f"more than one initial state: {sorted(initials)}")

    steps: dict[str, StepSpec] = {}
    class_errors = tuple(getattr(cls, "errors", {}).items())
    policy = getattr(cls, "retry_policy", DEFAULT_RETRY)
    for state, (attr, marker, fn) in markers.items():
        if state in RESERVED_STEPS:
            problems.append(f"state name {state!r} is reserved")
        elif not STEP_PATTERN.match(state):
            problems.append(f"state name {state!r} is not an identifier")
        if not marker.to:
            problems.append(f"state {state!r} has no way out: declare to=... (or to=COMPLETED)")
        for target in marker.to:
            if target != COMPLETED and target not in markers:
                problems.append(f"state {state!r} declares unknown target {target!r}")
        if marker.timeout is not None and marker.timeout <= 0:
            problems.append(f"state {state!r} has a non-positive timeout")
        for signal in marker.signals:
            if not isinstance(signal, str) or not SIGNAL_PATTERN.fullmatch(signal):
                problems.append(
                    f"state {state!r} declares signal name {signal!r}: use up to 100 letters, "
                    "digits, '_', '.', ':' or '-', starting with a letter or '_'"
                )
        steps[state] = StepSpec(
            name=state,
            method=attr,
            targets=frozenset(marker.to),
            is_async=inspect.iscoroutinefunction(fn),
            retry=marker.retry or policy,
            errors=marker.errors + class_errors,
            timeout=marker.timeout,
            signals=frozenset(marker.signals),
        )

    if len(initials) == 1:
        seen = {initials[0]}
        frontier = [initials[0]]
        while frontier:
            for target in steps[frontier.pop()].targets:
                if target in steps and target not in seen:
                    seen.add(target)
                    frontier.append(target)
        for state in steps:
            if state not in seen:
                problems.append(f"state {state!r} is unreachable from {initials[0]!r}")
        # Unreachable states are refused just above, so on a valid class one state that
        # declares COMPLETED gives the initial state a path to the end.
        if not _can_complete(steps):
            problems.append("no path from any state reaches COMPLETED")

    if problems:
        raise DefinitionError(name, problems)
    return WorkflowSpec(
        workflow_type=workflow_type,
        initial=initials[0],
        steps=dict(steps),
        input_model=input_model,
        progress_model=progress_model,
        has_reconcile=has_reconcile,
        doc=inspect.getdoc(cls) or "",
        _order=tuple(sorted(steps, key=lambda s: (s != initials[0], s))),
        dependencies=declared_dependencies(cls),
    )


def declared_dependencies(cls: type) -> frozenset[str]:
    """The class-level annotations of ``cls`` and its bases that have no value.

    ``ClassVar`` annotations, names that have a value (a default on the class or a base)
    and private names (``_x``) are not dependencies. Hints that cannot be resolved (a
    type imported only under ``TYPE_CHECKING``) are read as written.
    """
    names: dict[str, Any] = {}
    # Base classes first, so a subclass's annotation of the same name replaces its base's.
    for klass in reversed(cls.__mro__):
        if klass in (object, Generic, Workflow):
            continue
        names.update(inspect.get_annotations(klass))
    try:
        hints: dict[str, Any] = get_type_hints(cls)
    except Exception:  # unresolvable forward references: fall back to the raw text
        hints = names
    found = set()
    for name, raw in names.items():
        hint = hints.get(name, raw)
        if name.startswith("_") or hasattr(cls, name) or _is_classvar(hint):
            continue
        found.add(name)
    return frozenset(found)


def _is_classvar(hint: Any) -> bool:
    if isinstance(hint, str):
        return re.match(r"^(typing\.|t\.)?ClassVar\b", hint.strip()) is not None
    return hint is ClassVar or get_origin(hint) is ClassVar


def _can_complete(steps: Mapping[str, StepSpec]) -> bool:
    return any(COMPLETED in s.targets for s in steps.values())
