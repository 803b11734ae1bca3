"""How a runner's idle workers sleep: one of them, the timer holder, until the next due time.

The other idle workers sleep until a wake-up or the safety poll (``idle_poll``), so a
timer wakes one thread, not the whole pool. The holder that claims work passes the baton
(``nudge``) and the next idle worker takes the timer over (``Runner._pass_baton``).
Only the runner's worker threads call this; each keeps its own part in a thread-local.
:class:`WorkerState` is the rest of what a worker thread keeps between two claims.
"""

from __future__ import annotations

import threading
import time

CONTENDED = 0.005
"""Seconds the timer holder sleeps when work is due that its claim could not take."""
MARGIN = 0.0002
"""Seconds the timer holder wakes after the due time it measured (see :meth:`Idle.wait`)."""


class Idle:
    """The timer holder of one runner, and what each worker knows of its own last sleep."""

    def __init__(self, poll: float) -> None:
        self.poll = poll
        self._lock = threading.Lock()
        self._timer: tuple[int | None, float] = (None, 0.0)
        """The holder's thread id and the monotonic time it wakes at."""
        self._local = threading.local()

    def wait(self, due: float | None, asked: float) -> float:
        """Seconds to sleep, ``due`` being ``next_due``'s answer to a question asked at
        ``asked`` (monotonic): until the due time if this worker holds the timer, else the
        safety poll.

        The holder's sleep is counted from ``asked``, leaving out the answer's way back
        (it made every timer that late, later under load); the claim's own way there and
        ``MARGIN`` match the question's. A holder that still woke too early (its question
        waited for the interpreter) finds its claim empty and the task due: it claims again
        at once, once.
        """
        self._local.took = False
        if due is None or due >= self.poll:
            return self.poll
        if due <= 0:
            if getattr(self._local, "held", False) and not self._local.early:
                self._local.early = True
                return 0.0
            # Due now, and yet this worker's claim came back empty: another claim holds the
            # task this moment (SKIP LOCKED), or the due row is one no claim of ours takes.
            # A moment's sleep, not a spin of claim and next_due until that claim commits
            # (three wasted pairs per start with 8 workers: bench/README.md, "Idle workers"),
            # and by one worker, as a timer due in that moment: the others sleep until a
            # wake-up. Each idle worker polling so made, with 16 workers in each of four
            # processes starting workflows, two empty claims and two next_due a workflow
            # (bench/README.md, "Session 39"). Any wake-up ends the sleep early.
            at = time.monotonic() + min(self.poll, CONTENDED)  # from now, not from asked
        else:
            at = asked + due + MARGIN
        me = threading.get_ident()
        with self._lock:
            holder, holder_at = self._timer
            # An earlier due time takes the timer from a holder asleep for a later one.
            if holder is None or holder == me or at < holder_at:
                self._timer = (me, at)
                self._local.took = True
                return max(0.0, at - time.monotonic())
        return self.poll

    def woke(self, woken: bool) -> bool:
        """After the sleep (``woken``: by a wake-up, not the timeout): give the timer up if
        this worker held it. True if it slept as the holder, timed out, and was displaced
        meanwhile by an earlier due time: the new holder claims what is due, and a claim
        here would race it for nothing, so the caller sleeps on as a plain idle worker."""
        took = getattr(self._local, "took", False)
        with self._lock:
            held = self._timer[0] == threading.get_ident()
            if held:
                self._timer = (None, 0.0)
        self._local.held = held
        self._local.early = False
        return took and not woken and not held

    def handed_over(self) -> bool:
        """Whether this worker held the timer when it last woke, or holds it now (asked
        once per claim that took work: another idle worker must take the timer over);
        a timer still held is given up."""
        held = bool(getattr(self._local, "held", False))
        self._local.held = False
        with self._lock:
            if self._timer[0] == threading.get_ident():
                # It took the timer for a due time already passed (no sleep, so no
                # `woke` to give it up) and claimed at once: kept, the worker woken to
                # take it over saw a holder and slept the safety poll, and the next timer
                # waited for this worker's step to end (caught at load 2).
                self._timer = (None, 0.0)
                held = True
        return held


ALONE_ABOVE = 0.75
"""A runner whose instances' last commits claimed nothing more often than this (a moving
average) ends its instances without a claim (``Runner._drive_machine``)..."""

PROBE = 8
"""...except one in this many, which claims all the same: the average follows the load."""

EMPTY_WEIGHT = 1 / 8
"""The weight of an ending's claim in that moving average (about its last eight)."""

OWN_STARTS = 1.0
"""...and only once its process made no start for this many seconds: a start made while
a claim of its type is under way is left to that claim ("A start held in its process")."""


class WorkerState(threading.local):
    """What a worker thread carries from one instance to its next claim (defaults)."""

    skip_claim = False  # the commit that ended its last instance found nothing due
    nudge = False  # a baton its claim held back (Runner._deferred_nudge)
    look_first = False  # that commit claimed nothing: next_due before a claim
