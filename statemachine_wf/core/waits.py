"""Signals and timers: the pure decisions of a step that waits.

A step parks with ``ctx.wait_for(name, timeout=...)``, ``ctx.sleep(s)`` or
``ctx.sleep_until(t)``; the runner turns the :class:`~statemachine_wf.errors.Parked` it
raises into :func:`park`: a ``STEP_WAITING`` event carrying a fresh waiting token, the
instance's ``waiting`` key, a timer row (a signal of kind ``timer`` due at the deadline,
with the same token) and the task parked until the deadline, all in one commit.

Signals are rows in ``wf_signals``. Inserting one (from Python, the CLI or plain SQL)
bumps the instance's version and, if it waits, makes its task due. The runner that claims
a waiting instance reads its due pending rows and applies :func:`deliver`:

* a timer or a signal whose token is the wait's token resolves the wait (``TIMER_FIRED``
  / ``SIGNAL_RECEIVED``), and the step runs again from the top, finding the outcome;
* a row with any other token is stale: ``STALE_SIGNAL_DROPPED``, state ``stale``;
* an untokened signal resolves a wait for its name, or stays pending (buffered) until a
  wait for that name consumes it;
* a signal that cannot be applied (unknown name, payload not JSON or too large, a token
  of a wait for another name) is dead-lettered (``SIGNAL_REJECTED``).

Nothing here does I/O: the runner passes the rows in, a store applies the decision.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..definition.events import Ev, NewEvent
from ..definition.limits import value_problem
from ..definition.workflow import WorkflowSpec
from ..errors import InvalidState, Parked
from . import decide
from .decide import Decision, KeepTask, Park, SignalWrites, Timer
from .fold import Projection, apply_all


@dataclass(frozen=True, slots=True)
class NewSignal:
    """A signal to insert into ``wf_signals``."""

    instance_id: str
    name: str
    payload: Any = None
    token: str | None = None
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class SignalRecord:
    """One row of ``wf_signals``.

    ``payload`` is the decoded JSON; ``payload_error`` says why it could not be decoded
    (a row a non-Python producer wrote), in which case ``payload`` is the raw text.
    """

    id: int
    instance_id: str
    kind: str  # "signal" | "timer"
    name: str
    payload: Any
    token: str | None
    due_at: float
    state: str  # "pending" | "applied" | "stale" | "dead" | "void"
    created_at: float
    payload_error: str | None = None

    def envelope(self) -> dict[str, Any]:
        """The row as it goes into ``wf_dead_letters`` (the token is left out; a payload no
        store can keep is replaced by what is wrong with it)."""
        payload = self.payload
        found = value_problem(payload)
        if found is not None:
            payload = {"undecodable": f"{found[0]} {found[1]}"}
        return {
            "signal": self.id,
            "instance_id": self.instance_id,
            "kind": self.kind,
            "name": self.name,
            "payload": payload,
            "tokened": self.token is not None,
        }


def reserve(state: Projection, step: str, attempt: int, key: str, token: str) -> Decision:
    """``ctx.wait_token``: record the token of the wait ``key`` before it is handed out."""
    # Written ahead of the wait: if the process dies between handing the token out and
    # committing the wait, the step's next run reuses it, so the reply it brings is not
    # dropped as stale.
    event = NewEvent(Ev.WAIT_TOKEN, step, attempt, {"wait": key, "token": token})
    return Decision((event,), apply_all(state, [event]), KeepTask())


def park(state: Projection, step: str, attempt: int, exc: Parked, failures: int) -> Decision:
    """The action of ``step`` waits: record the wait, its timer, and park the task."""
    payload: dict[str, Any] = {
        "wait": exc.wait_key,
        "kind": exc.kind,
        "token": exc.token,
        "until": exc.until,
    }
    if exc.name is not None:
        payload["name"] = exc.name
    event = NewEvent(Ev.STEP_WAITING, step, attempt, payload)
    # The timer carries the wait's token: once the wait is over it is stale like any old
    # row, so it is never deleted, only dropped as stale when it is next read.
    timer = None if exc.until is None else Timer(exc.token, exc.until)
    return Decision(
        (event,),
        apply_all(state, [event]),
        Park(step, exc.until, exc.name, failures),
        SignalWrites(timer=timer),
    )


def payload_problem(signal: SignalRecord, max_payload: int) -> str | None:
    """Why a signal's payload cannot be applied, or None."""
    if signal.payload_error is not None:
        return f"payload is not JSON: {signal.payload_error}"
    found = value_problem(signal.payload)  # stored before the SQL checks of migration 010
    if found is not None:
        return f"payload {found[0]} {found[1]}"
    size = len(json.dumps(signal.payload, separators=(",", ":")).encode())
    if size > max_payload:
        return f"payload is {size} bytes; the limit is {max_payload} bytes"
    return None


def deliver(
    spec: WorkflowSpec,
    state: Projection,
    signals: Sequence[SignalRecord],
    *,
    max_payload: int,
    hold: bool = True,
) -> Decision:
    """Apply the due pending rows ``signals`` of a waiting instance.

    With the wait resolved, the step starts again in the same commit (``hold``) or is
    handed back due now (a stopping runner); otherwise the task is parked again.
    """
    key = state.waiting
    wait: Mapping[str, Any] | None = state.wait
    if key is None or wait is None:
        raise InvalidState("deliver: the instance is not waiting")
    step = state.current_step()
    attempt = state.attempts.get(step, 0)
    events: list[NewEvent] = []
    settled: list[tuple[int, str]] = []
    dead: list[tuple[dict[str, Any], str]] = []
    open_wait: Mapping[str, Any] | None = wait

    def event(et: Ev, payload: dict[str, Any]) -> None:
        events.append(NewEvent(et, step, attempt, payload))

    def stale(sig: SignalRecord) -> None:
        settled.append((sig.id, "stale"))
        reason = "no wait in progress" if open_wait is None else "token of an earlier wait"
        event(
            Ev.STALE_SIGNAL_DROPPED,
            {"signal": sig.id, "kind": sig.kind, "name": sig.name, "reason": reason},
        )

    def reject(sig: SignalRecord, reason: str) -> None:
        settled.append((sig.id, "dead"))
        dead.append((sig.envelope(), reason))
        event(Ev.SIGNAL_REJECTED, {"signal": sig.id, "name": sig.name, "reason": reason})

    # Oldest due first, ties in insertion order: when a timer and a reply are both due,
    # whichever fell due first decides the wait, whatever order the rows came in.
    for sig in sorted(signals, key=lambda s: (s.due_at, s.id)):
        # Once a row has resolved the wait (open_wait None), every later tokened row is
        # stale and a valid untokened one stays buffered for a wait still to come.
        token = None if open_wait is None else open_wait.get("token")
        if sig.kind == "timer":
            if open_wait is not None and sig.token == token:
                outcome = "timeout" if open_wait.get("kind") == "signal" else "slept"
                settled.append((sig.id, "applied"))
                event(Ev.TIMER_FIRED, {"wait": key, "outcome": outcome, "signal": sig.id})
                open_wait = None
            else:
                stale(sig)
            continue
        if sig.name not in spec.signal_names:
            reject(sig, f"unknown signal {sig.name!r}; accepted: {sorted(spec.signal_names)}")
            continue
        problem = payload_problem(sig, max_payload)
        if problem is not None:
            reject(sig, problem)
            continue
        awaited = open_wait is not None and open_wait.get("kind") == "signal"
        name_fits = awaited and open_wait is not None and open_wait.get("name") == sig.name
        if sig.token is not None:
            if open_wait is None or sig.token != token:
                stale(sig)
                continue
            if not name_fits:
                what = f"signal {open_wait.get('name')!r}" if awaited else "a timer"
                reject(sig, f"signal {sig.name!r} carries the token of a wait for {what}")
                continue
        elif not name_fits:
            continue  # buffered: stays pending until a wait for its name consumes it
        settled.append((sig.id, "applied"))
        event(
            Ev.SIGNAL_RECEIVED,
            {
                "wait": key,
                "outcome": "signal",
                "name": sig.name,
                "payload": sig.payload,
                "signal": sig.id,
            },
        )
        open_wait = None

    writes = SignalWrites(settled=tuple(settled), dead=tuple(dead))
    if open_wait is None:  # resolved: run the step again
        moved = decide.moved_on(state, events, step, hold=hold)
        return replace(moved, signals=writes)
    # Parked again with the wait's own deadline and name, which the park statement needs:
    # the task is due at the deadline, or sooner when a pending row this commit leaves
    # (a delayed reply, say) that may concern the wait falls due.
    name = wait.get("name") if wait.get("kind") == "signal" else None
    parked = Park(step, wait.get("until"), name)
    return Decision(tuple(events), apply_all(state, events), parked, writes)
