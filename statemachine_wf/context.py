"""What an action and a reconcile hook see: ``StepContext`` and ``ReconcileContext``.

The contexts are thin: reads come from values the runner loaded with the claim, and the
few writes (``save``, ``heartbeat``) go through a small host protocol the runner
implements, so this module stays free of I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel

from .errors import Waiting
from .progress import merge_progress

InputT = TypeVar("InputT", bound=BaseModel)
ProgressT = TypeVar("ProgressT", bound=BaseModel)


class StepHost(Protocol):
    """What the runner provides to a running action."""

    def save_progress(self, delta: Mapping[str, Any]) -> None: ...
    def heartbeat(self) -> None: ...
    def cancel_requested(self) -> bool: ...
    def acquire(self, key: str) -> str: ...
    def release(self, key: str) -> bool: ...


class StepContext(Generic[InputT, ProgressT]):
    """The view of one running step.

    Attributes:
        instance_id: the workflow instance's id.
        workflow_type: its versioned type name.
        step: the state whose action is running.
        attempt: 1 for the first try of this step, 2 for the next, …
        input: the validated, immutable input.
        reason: why this attempt runs: ``"new"`` or ``"retry"`` or ``"rerun"`` (in doubt).
    """

    def __init__(
        self,
        *,
        instance_id: str,
        workflow_type: str,
        step: str,
        attempt: int,
        input: InputT,
        progress: Mapping[str, Any],
        progress_model: type[ProgressT],
        host: StepHost,
        reason: str = "new",
    ) -> None:
        self.instance_id = instance_id
        self.workflow_type = workflow_type
        self.step = step
        self.attempt = attempt
        self.input = input
        self.reason = reason
        self._progress_model = progress_model
        self._saved: dict[str, Any] = dict(progress)
        self._staged: dict[str, Any] = {}
        self._host = host

    @property
    def progress(self) -> ProgressT:
        """Progress so far: everything saved plus everything staged in this step."""
        return self._progress_model.model_validate({**self._saved, **self._staged})

    def set(self, **fields: Any) -> None:
        """Stage set-once progress fields; they commit with the step's completion.

        Raises:
            ProgressConflict: a field already holds another value (nothing is staged).
            pydantic.ValidationError: a value does not fit the progress model.
        """
        merged = merge_progress(self._progress_model, {**self._saved, **self._staged}, fields)
        self._staged.update({k: merged[k] for k in fields})

    def save(self, **fields: Any) -> None:
        """Record set-once progress fields durably *now*, before a side effect.

        This is how an identity (a signed transaction's hash, an upload id) is written
        ahead of the side effect that uses it. The write is version-checked.
        """
        merged = merge_progress(self._progress_model, {**self._saved, **self._staged}, fields)
        delta = {k: merged[k] for k in fields if self._saved.get(k) != merged[k]}
        if not delta:  # a retried step saving what it saved before: nothing to write
            return
        self._host.save_progress(delta)
        self._saved.update(delta)
        for key in delta:
            self._staged.pop(key, None)

    def heartbeat(self) -> None:
        """Extend this runner's lease now (the runner also does it on its own)."""
        self._host.heartbeat()

    def hold(self, key: str, *, recheck: float = 30.0) -> None:
        """Hold the durable lock ``key`` for this instance, or park the step until it frees.

        The lock belongs to the instance, not to a process: it survives steps and runner
        crashes, and is released by :meth:`release` or when the instance ends (completed,
        failed or cancelled). Holding it again is a no-op. If another instance holds it,
        this raises :class:`~statemachine_wf.errors.Waiting`; the step is parked and runs
        again when the holder releases (``recheck`` seconds is the safety net for a lost
        wake-up).
        """
        holder = self._host.acquire(key)
        if holder != self.instance_id:
            raise Waiting(key, holder, recheck=recheck)

    def release(self, key: str) -> bool:
        """Release the lock ``key`` now (waiters are woken); False if we did not hold it."""
        return self._host.release(key)

    @property
    def cancel_requested(self) -> bool:
        """True once somebody asked to cancel this instance; stop early if you can."""
        return self._host.cancel_requested()

    @property
    def staged(self) -> dict[str, Any]:
        """Fields staged with :meth:`set` and not yet saved."""
        return dict(self._staged)


Decision = Literal["unchanged", "rerun", "goto", "complete"]


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """What a reconcile hook found, and the evidence that goes into the log."""

    decision: Decision
    to: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    progress: Mapping[str, Any] = field(default_factory=dict)


class ReconcileContext(Generic[InputT, ProgressT]):
    """The view a reconcile hook gets.

    Attributes:
        instance_id, workflow_type, step, attempt, input: as in :class:`StepContext`.
        progress: everything recorded so far (saved mid-step included).
        in_doubt: an attempt of ``step`` started and never recorded an end.
        reason: ``"startup"``, ``"in_doubt"`` or ``"timeout"``.
    """

    def __init__(
        self,
        *,
        instance_id: str,
        workflow_type: str,
        step: str,
        attempt: int,
        input: InputT,
        progress: ProgressT,
        in_doubt: bool,
        reason: str,
    ) -> None:
        self.instance_id = instance_id
        self.workflow_type = workflow_type
        self.step = step
        self.attempt = attempt
        self.input = input
        self.progress = progress
        self.in_doubt = in_doubt
        self.reason = reason

    @staticmethod
    def unchanged(**evidence: Any) -> Reconciliation:
        """Nothing to correct: an in-doubt step then runs again, anything else resumes."""
        return Reconciliation("unchanged", evidence=evidence)

    @staticmethod
    def rerun(**evidence: Any) -> Reconciliation:
        """The step's effect did not happen: run it again."""
        return Reconciliation("rerun", evidence=evidence)

    @staticmethod
    def goto(
        step: str, *, progress: Mapping[str, Any] | None = None, **evidence: Any
    ) -> Reconciliation:
        """The outside world is already at ``step``: move there (with progress found)."""
        return Reconciliation("goto", to=step, evidence=evidence, progress=progress or {})

    @staticmethod
    def complete(*, progress: Mapping[str, Any] | None = None, **evidence: Any) -> Reconciliation:
        """The outside world says the whole workflow is done."""
        return Reconciliation("complete", evidence=evidence, progress=progress or {})
