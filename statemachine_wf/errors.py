"""Every error statemachine_wf raises, rooted at :class:`WorkflowError`.

The tree::

    WorkflowError
    ├── DefinitionError            a workflow class or DAG is malformed (import time)
    ├── InputError                 bad input to start/signal; nothing was written (also a
    │   │                          ValueError; pydantic's ValidationError is its __cause__)
    │   ├── UnknownWorkflowType
    │   └── PayloadTooLarge
    ├── ProgressConflict           a set-once progress field was set again with another value
    ├── NotFound                   no instance with that id
    ├── InvalidState               the operation does not apply in the instance's status
    ├── ConcurrencyConflict        a CAS lost: somebody else decided first
    ├── LeaseLost                  this runner no longer holds the task it is working on
    ├── StoreError                 the database failed (driver error wrapped)
    │   ├── DataRejected           the database refused this data; retrying cannot help
    │   ├── StoreUnavailable       the database could not be reached (lost, restarting, down)
    │   └── MigrationError
    │       └── SchemaTooNew       the database was migrated by a newer statemachine_wf
    ├── MissingDependencies        a runner was not given what its workflows declare
    └── StepFailure                raised *by actions* to classify a failure explicitly
        ├── Retry                  retry with backoff (the retry policy decides when to give up)
        ├── Stall                  wait for an external condition, auto-retry later
        ├── Fail                   terminal: FAILED, manual intervention needed
        │   ├── WaitTimeout        ctx.wait_for's timeout passed before the signal came
        │   └── UndeclaredTransition  an action returned a target its step does not declare
        └── Waiting                not a failure: parked until a lock frees (ctx.hold)
            ├── Snooze             not a failure: run this step again in N seconds
            └── Parked             not a failure: ctx.wait_for / ctx.sleep parked the step

Adapters root their own errors here too
(``statemachine_wf.adapters.ethereum.errors.ChainError`` is a ``WorkflowError``), so
``except WorkflowError`` catches everything the SDK raises.
An error made without a message takes the first paragraph of its class docstring, on one
line (``str(NotFound())`` is ``No such workflow instance.``), never the whole docstring.
"""

from __future__ import annotations

import math
import re
from typing import Any

MAX_DURATION = 100 * 365.25 * 86400.0
"""The longest duration (seconds) a step may ask for: a snooze, a stall's ``retry_in``, a
lock recheck, a durable sleep or wait, a retry delay. Longer, infinite or NaN values are
refused where they are made, so both stores see only values both can store."""


def check_duration(name: str, seconds: float) -> float:
    """``seconds`` as a float if it is a finite number in [0, MAX_DURATION]; else ValueError."""
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of seconds, got {seconds!r}") from None
    if not (math.isfinite(value) and 0 <= value <= MAX_DURATION):
        raise ValueError(
            f"{name} must be a finite number of seconds in [0, {MAX_DURATION:.0f}], got {seconds}"
        )
    return value


def default_message(cls: type) -> str:
    """The first paragraph of ``cls``'s own docstring on one line, else its name.

    Only the first paragraph: the rest of a docstring (attributes, how the runtime
    handles the error) is documentation, not a message for a log line or a stored error.
    Public so that an adapter whose errors build their own message (Arweave's, which add
    the HTTP details) says the same default as the core's.
    """
    paragraph = re.split(r"\n\s*\n", (cls.__doc__ or "").strip(), maxsplit=1)[0]
    return " ".join(paragraph.split()) or cls.__name__


class WorkflowError(Exception):
    """A statemachine_wf error."""

    def __init__(self, message: str | None = None, **attrs: Any) -> None:
        self.message = message or default_message(type(self))
        # Extra keyword arguments become attributes (InputError's path and problem), so a
        # caller reads the parts without parsing the message.
        for key, value in attrs.items():
            setattr(self, key, value)
        super().__init__(self.message)


class DefinitionError(WorkflowError):
    """The workflow definition is invalid."""

    def __init__(self, name: str, problems: list[str]) -> None:
        self.name = name
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{name} has {len(self.problems)} problem(s):\n{lines}")


class InputError(WorkflowError, ValueError):
    """The input is invalid; nothing was written.

    Every producer path raises it for bad input (the input model's validation, the
    schedule, the keys, the payload limit), naming the field and the problem; when the
    input model refused the input, pydantic's ``ValidationError`` is its ``__cause__``.
    It is a ``ValueError`` too.

    Attributes:
        fields: ``(field, problem)`` pairs where the input model refused fields (dotted
            paths, ``"(input)"`` for the whole value); empty otherwise.
    """

    fields: tuple[tuple[str, str], ...] = ()


class UnknownWorkflowType(InputError):
    """No workflow of that type is registered."""

    def __init__(self, type_name: str, known: list[str] | None = None) -> None:
        self.type_name = type_name
        hint = f" (known: {', '.join(sorted(known))})" if known else ""
        super().__init__(f"unknown workflow type {type_name!r}{hint}")


class TypeKindConflict(InputError):
    """A workflow type is registered as one kind (state machine or DAG) and used as the other.

    Every type is one kind only, in the database too: a runner that hosts a state machine
    and one that hosts DAGs of the same type name cannot both start.
    """

    def __init__(self, type_name: str, registered: str, wanted: str) -> None:
        self.type_name = type_name
        super().__init__(
            f"type {type_name!r} is registered as a {registered} type; it cannot also be a "
            f"{wanted} type (every type name is one kind only)"
        )


class PayloadTooLarge(InputError):
    """The payload is larger than the limit."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"{what} is {size} bytes; the limit is {limit} bytes")


class ProgressConflict(WorkflowError):
    """A set-once progress field was set again with another value."""

    def __init__(self, field: str, old: Any, new: Any) -> None:
        self.field = field
        super().__init__(
            f"progress field {field!r} is already set to {old!r}; refusing to change it to {new!r}"
        )


class NotFound(WorkflowError):
    """No such workflow instance."""


class InvalidState(WorkflowError):
    """The operation does not apply to the instance in its current status."""


class ConcurrencyConflict(WorkflowError):
    """Somebody else changed the instance first (the version check failed)."""

    def __init__(self, instance_id: str, expected: int, actual: int | None = None) -> None:
        self.instance_id = instance_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"instance {instance_id} is no longer at version {expected}"
            + (f" (now {actual})" if actual is not None else "")
        )


class LeaseLost(WorkflowError):
    """This runner no longer holds the task; another runner owns it now."""


class StoreError(WorkflowError):
    """The store failed."""


class DataRejected(StoreError):
    """The database refused this data (a value it cannot store); retrying cannot help.

    Not "the database is away" (a plain :class:`StoreError`, retried): a data exception
    (a NUL or a lone surrogate in text, a number out of range, invalid JSON text) or a
    constraint violation other than the version check. The runner sets the instance
    aside (quarantined, with a dead letter and the reason) instead of running it again.
    """


class StoreUnavailable(StoreError):
    """The database could not be reached.

    Attributes:
        lost: True when a connection was lost under the call (a restart, a crash, the
            network): the outcome of a write in flight is unknown, and one more try on
            a fresh connection may well succeed at once. False when no connection could
            be had within the store's ``pool_timeout``: the store has waited already.
    """

    def __init__(self, message: str | None = None, *, lost: bool = True) -> None:
        super().__init__(message)
        self.lost = lost


class MigrationError(StoreError):
    """The database schema could not be migrated."""


class SchemaTooNew(MigrationError):
    """The database schema is newer than this code: refusing to use it.

    A newer statemachine_wf migrated it (``found``); this one knows migrations up to
    ``known``. Running old code on a newer schema could write rows the newer runners
    misread, so ``migrate``, the stores and ``Runner.start`` refuse instead.
    """

    def __init__(self, found: int, known: int) -> None:
        self.found = found
        self.known = known
        super().__init__(
            f"the database schema is at version {found}, newer than this statemachine_wf "
            f"knows (up to {known}): upgrade statemachine_wf; refusing to use it"
        )


class MissingDependencies(WorkflowError):
    """A runner was not given the dependencies its workflows declare.

    ``missing`` maps each workflow type to the names it declares (class-level annotations
    without a value) and the runner's ``dependencies`` lack.
    """

    def __init__(self, missing: dict[str, list[str]], given: list[str]) -> None:
        self.missing = {t: sorted(names) for t, names in sorted(missing.items())}
        self.given = sorted(given)
        lines = "\n".join(f"  - {t} needs: {', '.join(n)}" for t, n in self.missing.items())
        have = ", ".join(self.given) if self.given else "none"
        super().__init__(
            f"refusing to start: workflows need dependencies that were not given "
            f"(given: {have}):\n{lines}\n"
            "pass them with Runner(..., dependencies={...}) or statemachine-wf worker "
            "--deps MODULE:FUNCTION"
        )


class StepFailure(WorkflowError):
    """Base of the exceptions an action raises to classify its own failure.

    Attributes:
        code: a short machine-readable code stored with the error.
    """

    code = "step_failure"

    def __init__(self, message: str | None = None, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class Retry(StepFailure):
    """A transient failure: try the step again after a backoff."""

    code = "retry"


class Stall(StepFailure):
    """An external condition is missing: the instance is STALLED and retried later."""

    code = "stalled"

    def __init__(
        self, message: str | None = None, *, code: str | None = None, retry_in: float | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.retry_in = None if retry_in is None else check_duration("retry_in", retry_in)


class Fail(StepFailure):
    """A terminal failure: the instance is FAILED and needs manual intervention."""

    code = "failed"


class Waiting(StepFailure):
    """The step cannot go on until a lock held by another instance is released.

    Raised by ``ctx.hold(key)``; the runtime parks the step (no failure is counted) and
    runs it again, as a new attempt, when the holder releases the lock.
    """

    code = "waiting"

    def __init__(self, key: str, holder: str, *, recheck: float = 30.0) -> None:
        super().__init__(f"waiting for lock {key!r} held by instance {holder}")
        self.key: str | None = key
        self.holder: str | None = holder
        self.recheck = check_duration("recheck", recheck)


class Snooze(Waiting):
    """Not done yet (a transaction still pending): run this step again in ``seconds``.

    No failure is counted and the retry policy is not consulted; the step's next attempt
    is due after ``seconds``. Use it for polling an external condition that is expected
    to change, and ``Stall`` for one that needs help.
    """

    code = "snooze"

    def __init__(self, seconds: float, reason: str = "not done yet") -> None:
        seconds = check_duration("seconds", seconds)
        # Past Waiting.__init__, which wants a lock: key None is how the runtime tells a
        # snooze from a lock wait (decide logs it as a snooze; no lock is rechecked).
        StepFailure.__init__(self, reason)
        self.key = None
        self.holder = None
        self.recheck = seconds


class Parked(Waiting):
    """The step waits for a signal or a timer (``ctx.wait_for``, ``ctx.sleep``).

    Raised by the context and handled by the runner, which parks the step durably (no
    thread sleeps, the lease is released) and runs it again from the top once the wait is
    over; do not catch it in an action.
    """

    code = "parked"

    def __init__(
        self, *, key: str, kind: str, name: str | None, token: str, until: float | None
    ) -> None:
        what = f"signal {name!r}" if kind == "signal" else "a timer"
        StepFailure.__init__(self, f"waiting for {what}")
        # The lock fields are unused: the runner catches Parked before any other Waiting
        # and wakes the step by its signal or timer, never by a recheck.
        self.key = None
        self.holder = None
        self.recheck = 0.0
        self.wait_key = key
        self.kind = kind
        self.name = name
        self.token = token
        self.until = until


class UndeclaredTransition(Fail):
    """An action returned a transition its step does not declare.

    Recorded, not raised into the action: the instance is FAILED with error code
    ``undeclared_transition`` and this class as the error's ``type``. A reconcile hook
    that chooses a step the workflow does not have fails the same way.
    """

    code = "undeclared_transition"

    def __init__(self, step: str, target: object, allowed: list[str], *, by: str = "step") -> None:
        self.step = step
        self.target = target
        self.allowed = sorted(allowed)
        if by == "reconcile":
            message = (
                f"the reconcile hook of step {step!r} chose {target!r}; "
                f"the workflow has only steps {self.allowed}"
            )
        else:
            message = f"step {step!r} returned {target!r}; it declares only {self.allowed}"
        super().__init__(message)


class WaitTimeout(Fail):
    """The wait's timeout passed before the signal arrived.

    Raised by ``ctx.wait_for`` (again on every re-run of the step, so catching it is
    deterministic). Uncaught, it fails the instance (code ``wait_timeout``).
    """

    code = "wait_timeout"

    def __init__(self, name: str, timeout: float | None) -> None:
        super().__init__(f"no signal {name!r} within {timeout} s")
        self.name = name
        self.timeout = timeout
