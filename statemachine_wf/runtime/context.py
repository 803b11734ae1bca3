"""What an action and a reconcile hook see: ``StepContext`` and ``ReconcileContext``.

The contexts are thin: reads come from values the runner loaded with the claim, and the
few writes (``save``, ``heartbeat``) go through a small host protocol the runner
implements, so the contexts stay free of I/O. The one exception is :class:`Waker`, what
``ctx.waker()`` returns: event sources call it from their own threads, after the step.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from ..core.decide import Reconciliation as Reconciliation  # re-exported: hooks return it
from ..core.progress import merge_progress
from ..core.store import Store
from ..errors import Fail, Parked, StoreError, Waiting, WaitTimeout, check_duration

log = logging.getLogger("statemachine_wf.runner")

InputT = TypeVar("InputT", bound=BaseModel)
ProgressT = TypeVar("ProgressT", bound=BaseModel)


class StepHost(Protocol):
    """What the runner provides to a running action."""

    def save_progress(self, delta: Mapping[str, Any]) -> None: ...
    def heartbeat(self) -> None: ...
    def cancel_requested(self) -> bool: ...
    def acquire(self, key: str) -> str: ...
    def release(self, key: str) -> bool: ...
    def reserve_token(self, key: str, token: str) -> None: ...
    def waker(self) -> Callable[[], None]: ...


def new_token() -> str:
    """A fresh waiting token: 128 random bits, hex."""
    return uuid.uuid4().hex


class StepContext(Generic[InputT, ProgressT]):
    """The view of one running step.

    Attributes:
        instance_id: the workflow instance's id.
        workflow_type: its versioned type name.
        step: the state whose action is running.
        attempt: 1 for the first run of this step, 2 for the next, …: every run counts,
            a re-run after a ``Snooze`` or a lock wait too (attempt numbers never repeat),
            but only failures count against the retry policy's ``max_attempts``.
        input: the validated, immutable input.
        reason: ``"new"`` for attempt 1, ``"retry"`` for every later one (after a failure,
            a snooze or lock wait, or an in-doubt attempt the reconcile hook left
            unchanged).
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
        waits: Mapping[str, Mapping[str, Any]] | None = None,
        signals: Iterable[str] = (),
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
        self._waits: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (waits or {}).items()}
        self._signals = frozenset(signals)
        self._wait_index = 0

    def replay(self, wrap: Callable[[StepHost], StepHost]) -> StepContext[InputT, ProgressT]:
        """A fresh context of this attempt, from what it has saved so far, whose host is
        ``wrap`` of this one.

        For the testing helpers: they replay an attempt that crashed through one (the
        wrapped host stops the run where the crash struck) before the attempt that goes
        on, and :meth:`keep_saved` takes back what the replay saved.
        """
        return StepContext(
            instance_id=self.instance_id,
            workflow_type=self.workflow_type,
            step=self.step,
            attempt=self.attempt,
            input=self.input,
            progress=self._saved,
            progress_model=self._progress_model,
            host=wrap(self._host),
            reason=self.reason,
            waits=self._waits,
            signals=self._signals,
        )

    def keep_saved(self, replay: StepContext[InputT, ProgressT]) -> None:
        """Take what ``replay`` (from :meth:`replay`) saved durably as saved here too."""
        self._saved.update(replay._saved)

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

    def waker(self) -> Callable[[], None]:
        """A callable that cuts this instance's wait short: for an outside event source.

        Hand it to something that learns, in another thread, that waiting is over (a new
        block, a file appearing) and raise ``Snooze`` as usual: calling it makes the
        instance due at once instead of when the snooze ends. It is safe from any thread
        and any number of times. A call while the step still runs takes effect once the
        step's outcome is committed (never lost in between); a call once the instance has
        moved on only makes its next wait end early, so a spurious call costs one more run
        of the step and never a wrong outcome.
        """
        return self._host.waker()

    # -- signals and timers -------------------------------------------------------------
    # Waits are keyed by their call order within the step ("0", "1", ...): the step runs
    # again from the top after each wait, and each call finds its recorded outcome.
    @property
    def wait_token(self) -> str:
        """The token of this step's next wait, to hand to whoever will send the signal.

        The token is recorded durably before it is returned (write-ahead), so a re-run of
        the step after a crash hands out the same token. A signal that carries a token is
        applied only to the wait with that token; any other wait drops it as stale.
        """
        key = str(self._wait_index)
        entry = self._waits.get(key)
        token = None if entry is None else entry.get("token")
        if token:
            return str(token)
        token = new_token()
        self._host.reserve_token(key, token)
        self._waits[key] = {"token": token}
        return token

    def wait_for(self, name: str, *, timeout: float | None = None) -> Any:
        """Wait durably for the signal ``name``; return its payload.

        The step is parked (no thread sleeps, the lease is released) until the signal
        arrives, and then runs again from the top; this call then returns the recorded
        payload at once. So code before the wait runs again: keep it idempotent.

        Raises:
            WaitTimeout: ``timeout`` seconds passed first (raised on every re-run too).
            Fail: the step does not declare ``name`` in ``@step(signals=[...])``.
        """
        if name not in self._signals:
            raise Fail(
                f"step {self.step!r} waits for signal {name!r} but declares only "
                f"signals={sorted(self._signals)}",
                code="undeclared_signal",
            )
        if timeout is not None:
            check_duration("timeout", timeout)
        key, entry = self._next_wait("signal", name)
        outcome = entry.get("outcome")
        if outcome == "timeout":
            raise WaitTimeout(name, timeout)
        if outcome is not None:
            return entry.get("payload")
        until = None if timeout is None else time.time() + timeout
        raise self._park(key, entry, "signal", name, until)

    def sleep(self, seconds: float) -> None:
        """Sleep durably for ``seconds``: the step is parked and runs again afterwards."""
        self._sleep(time.time() + check_duration("seconds", seconds))

    def sleep_until(self, when: datetime) -> None:
        """Sleep durably until ``when`` (a timezone-aware datetime)."""
        if when.tzinfo is None:
            raise ValueError("sleep_until needs a timezone-aware datetime (e.g. UTC)")
        check_duration("sleep_until's time from now", max(0.0, when.timestamp() - time.time()))
        self._sleep(when.timestamp())

    def _sleep(self, until: float) -> None:
        key, entry = self._next_wait("sleep", None)
        if entry.get("outcome") is None:
            raise self._park(key, entry, "sleep", None, until)

    def _next_wait(self, kind: str, name: str | None) -> tuple[str, dict[str, Any]]:
        key = str(self._wait_index)
        self._wait_index += 1
        entry = self._waits.get(key, {})
        if "kind" in entry and (entry["kind"], entry.get("name")) != (kind, name):
            raise Fail(
                f"step {self.step!r} is not deterministic: its wait #{key} was a "
                f"{entry['kind']} {entry.get('name') or ''} and is now a {kind} {name or ''}",
                code="nondeterministic_wait",
            )
        return key, entry

    @staticmethod
    def _park(
        key: str, entry: Mapping[str, Any], kind: str, name: str | None, until: float | None
    ) -> Parked:
        if "kind" in entry:  # the same wait again: same token, same deadline
            until = entry.get("until")
        token = str(entry.get("token") or new_token())
        return Parked(key=key, kind=kind, name=name, token=token, until=until)

    @property
    def cancel_requested(self) -> bool:
        """True once somebody asked to cancel this instance; stop early if you can."""
        return self._host.cancel_requested()

    @property
    def staged(self) -> dict[str, Any]:
        """Fields staged with :meth:`set` and not yet saved."""
        return dict(self._staged)


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


class Waker:
    """``ctx.waker()``: make the instance due from another thread, never lost.

    While the step runs, its task is leased and a wake-up could not reach it (the store
    wakes unleased tasks only), so a call then is remembered and made by the driver once
    the step's outcome is committed (:meth:`committed`); after that, a call wakes at once.
    """

    def __init__(self, store: Store, instance_id: str) -> None:
        self._store = store
        self._id = instance_id
        self._lock = threading.Lock()
        self._committed = False
        self._asked = False

    def __call__(self) -> None:
        with self._lock:
            if not self._committed:
                self._asked = True
                return
        self._wake()

    def committed(self) -> None:
        with self._lock:
            self._committed = True
            asked = self._asked
        if asked:
            self._wake()

    def _wake(self) -> None:
        # Called from event sources' threads: the safety net (the snooze's own end) still
        # holds if the database is away now, so say it and go on.
        try:
            self._store.wake_instances([self._id])
        except StoreError as exc:
            log.debug("instance %s: wake-up not made (%s)", self._id, exc)
