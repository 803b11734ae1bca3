"""Starts leased to a runner of another process (PostgreSQL): this process's side.

A start whose own process has no worker of its type asleep leases its task to a runner
of another process that has one (``create_offered`` in ``queries.sql``), in the start's
own commit, and tells that process alone, on the channel of its LISTEN connection, with
the instance's id. The worker then runs the step without a claim of its own, as it runs
a start of its own process (docs/architecture.md, "A start leased to a runner of another
process"). For that the process keeps one row a runner in ``wf_idle_runners``
(migration 023): how many of its workers sleep, a hint a few milliseconds behind.

:class:`Offers` keeps those rows up to date from a thread of its own (at most one write
every ``gap`` seconds, committed without waiting for the flush: a hint), hears the starts
leased here (:meth:`Offers.received`, on the LISTEN thread) and hands each to its runner's
workers, and takes a runner's row away when it stops (:meth:`Offers.retire`). A row is
trusted only while its process holds the advisory lock ``lock_key`` on the LISTEN
connection (``PgConnections._watch``): a killed process's rows are passed over at once.
"""

from __future__ import annotations

import logging
import secrets
import threading
import uuid
from collections.abc import Callable
from typing import Any

from ..core.store import Claim, Claimant
from ..errors import StoreError
from ._common import task_record
from ._wakeup import Wakeup

log = logging.getLogger("statemachine_wf.postgres")

Row = dict[str, Any]

SPARE_WAIT = 0.1
"""Seconds a start leased to a runner waits for one of its workers when none slept as it
was heard, before it is handed back for any runner (``Offers._hand``)."""


class Offers:
    """``wf_idle_runners`` for one store object's runners, and the starts leased to them.

    Args:
        wakeup: the store's :class:`Wakeup` (who sleeps; where a leased start is handed).
        write: runs a named write query with parameters, on the store's pool: its one
            row or None.
        instance: the claimed instance row's record (``SqlStore._checked``).
        gap: the least time between two writes of the rows.
        spare_wait: how long a start leased here waits for a worker when none slept.
    """

    def __init__(
        self,
        wakeup: Wakeup,
        *,
        write: Callable[..., Row | None],
        instance: Callable[[Any], Any],
        encode: Callable[[Any], Any],
        gap: float = 0.025,
        spare_wait: float = SPARE_WAIT,
    ) -> None:
        self._wakeup = wakeup
        self._write, self._instance, self._encode = write, instance, encode
        self.gap = gap
        self.spare_wait = spare_wait
        # A positive bigint no other process draws; the LISTEN connection holds it.
        self.lock_key = secrets.randbits(62) + 1
        self.channel = f"swf_offer_{secrets.token_hex(8)}"
        self._mutex = threading.Lock()  # guards the dicts and flags below
        self._writing = threading.Lock()  # one write of the rows at a time (and retire)
        self._claimants: dict[str, Claimant] = {}  # by incarnation: each runner seen asleep
        self._written: dict[str, int] = {}  # each runner's count, as the table holds it
        self._retired: set[str] = set()
        self._markers: dict[str, threading.Event] = {}
        self._locked = False  # the LISTEN connection holds lock_key and listens
        self._sweep = True
        self._changed = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the LISTEN thread's side ---------------------------------------------------------
    def listening(self) -> None:
        """The LISTEN connection holds the lock and listens (again): every row is written
        afresh, and the rows of processes that are gone are swept."""
        with self._mutex:
            self._locked, self._sweep = True, True
            self._written.clear()
        self._changed.set()

    def rekey(self) -> None:
        """Another lock key: the last one is held still (by our LISTEN connection that
        was lost, until the server notices)."""
        self.lock_key = secrets.randbits(62) + 1

    def lost(self) -> None:
        """The LISTEN connection is gone, and the lock with it: starts pass over our rows
        until :meth:`listening`."""
        with self._mutex:
            self._locked = False

    def received(self, payload: str) -> None:
        """A notification on :attr:`channel`: a start leased here (the instance's id), or
        a :meth:`retire` marker. Never raises: it runs on the LISTEN thread, which wakes
        every worker of the process."""
        with self._mutex:
            marker = self._markers.pop(payload, None)
        if marker is not None:
            marker.set()
            return
        try:
            uuid.UUID(payload)
        except ValueError:
            return  # a marker nobody waits for any more (its retire gave up, or close)
        try:
            self._hand(payload)
        except Exception:
            log.exception("a start leased to this process: not handed (its lease runs out)")

    def _hand(self, payload: str) -> None:
        """Take the start and hand it to a worker of its runner asleep.

        The runner's row is a hint behind its workers: the one the start counted on may
        have woken meanwhile. The claim then waits for the next of the runner's workers
        to look, for up to :attr:`spare_wait` seconds; not taken by then (every worker is
        in a long step), it is handed back, due at once for any runner, with a
        STEP_RELEASED that says it never ran (not in doubt), rather than wait minutes for
        this one while another idles."""
        try:
            # Heard: the lease becomes the runner's own, which its heartbeat extends.
            row = self._write("offered", id=payload)
        except StoreError as exc:
            # Not heard: no heartbeat extends the lease, which runs out, and the task is
            # taken over (as after a crash).
            log.warning("a start leased to this process could not be taken: %s", exc)
            return
        token = "" if row is None else str(row["lease_token"] or "")
        with self._mutex:
            claimant = self._claimants.get(token.partition("/")[0])
            if claimant is not None and self._written.get(claimant.incarnation, 0) > 0:
                self._written[claimant.incarnation] -= 1  # as the start counted it
        self._changed.set()
        if row is None or claimant is None or row["lease_owner"] != claimant.worker:
            return  # no longer ours: its lease ran out and somebody took it over
        try:
            instance = self._instance(row["instance"])
            claim = Claim(task_record(row), instance, started=True, more=False)
        except (ValueError, KeyError, TypeError) as exc:
            # Leased and started: released, the claim after it sets the row aside with
            # the reason, as a claim does with a row it cannot read.
            log.warning("a start leased to this process will not read: %s", exc)
            self._release(claimant, payload, token)
            return
        if self._wakeup.hand(claimant, [claim]) > 0:
            timer = threading.Timer(self.spare_wait, self._withdraw, (claimant, claim))
            timer.daemon = True
            timer.start()

    def _withdraw(self, claimant: Claimant, claim: Claim) -> None:
        """Hand ``claim`` back unless a worker of ``claimant`` took it meanwhile."""
        if not self._wakeup.withdraw(claimant, claim):
            return
        try:
            self._release(claimant, claim.instance.id, claim.task.lease_token, unrun=True)
        except StoreError as exc:
            # Its lease runs out, and the task is taken over.
            log.warning("a start leased to this process could not be handed back: %s", exc)

    def _release(
        self, claimant: Claimant, instance_id: str, token: str | None, *, unrun: bool = False
    ) -> None:
        """Hand a start leased to ``claimant`` back: due at once for any runner. ``unrun``:
        no worker took it, so its attempt gets a STEP_RELEASED and is not in doubt;
        otherwise it is in doubt (its STEP_STARTED is in the log)."""
        mine = claimant.incarnation + "/"
        unrun = unrun and bool(token)  # only a claim named by its token
        ids = [instance_id]
        self._write("release", worker=claimant.worker, ids=ids, token=token, mine=mine, unrun=unrun)

    # -- the workers' side --------------------------------------------------------------
    def changed(self) -> None:
        """A worker of this process went to sleep or woke (``Wakeup.changed``)."""
        if self._thread is None:
            with self._mutex:
                if self._thread is None and not self._closed.is_set():
                    self._thread = threading.Thread(
                        target=self._run, name="swf-idle-runners", daemon=True
                    )
                    self._thread.start()
        self._changed.set()

    def retire(self, claimant: Claimant, timeout: float = 5.0) -> None:
        """``claimant``'s runner stops: no start leases to it from now on. Returns once
        every start leased to it before that has been heard (handed to its workers, for
        the runner to release), or after ``timeout``."""
        inc = claimant.incarnation
        marker = f"retired {inc} {secrets.token_hex(4)}"
        heard = threading.Event()
        with self._writing:
            with self._mutex:
                self._retired.add(inc)
                if inc not in self._claimants:
                    return  # never asleep here: no row, no start leased to it
                listening = self._locked
                self._markers[marker] = heard
            listening = self._take_rows(inc, marker) and listening
        if listening:
            heard.wait(timeout)
        with self._mutex:
            self._markers.pop(marker, None)
            self._claimants.pop(inc, None)
            self._written.pop(inc, None)

    def close(self) -> None:
        """Stop writing, and take every runner's row of this process away (best effort:
        they are passed over once the LISTEN connection is closed anyway)."""
        self._closed.set()
        self._changed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._mutex:
            written = bool(self._claimants)
        if written:
            self._take_rows(None, "closed")

    def _take_rows(self, incarnation: str | None, marker: str) -> bool:
        """Delete ``incarnation``'s row (None: every row of this process) and send
        ``marker`` after the starts that took it; False if the store failed (the rows go
        with the process's lock)."""
        try:
            self._write(
                "idle_retire",
                lock_key=self.lock_key,
                incarnation=incarnation,
                channel=self.channel,
                marker=marker,
            )
        except StoreError as exc:
            log.debug("idle runners of this process not deleted: %s", exc)
            return False
        return True

    # -- the writer thread ---------------------------------------------------------------
    def _run(self) -> None:
        while not self._closed.is_set():
            self._changed.wait()
            if self._closed.is_set():
                return
            self._changed.clear()
            try:
                self._sync()
            except StoreError as exc:
                log.debug("idle runners not written (%s); trying again", exc)
                self._closed.wait(1.0)
                self._changed.set()
            self._closed.wait(self.gap)

    def _sync(self) -> None:
        """Write each runner's count of workers asleep that the table does not hold."""
        asleep = self._wakeup.asleep()
        with self._writing:
            with self._mutex:
                if not self._locked:
                    return  # written once the LISTEN connection holds the lock again
                for claimant in asleep:
                    if claimant.types and claimant.incarnation not in self._retired:
                        self._claimants.setdefault(claimant.incarnation, claimant)
                batch: list[Row] = [
                    {
                        "incarnation": inc,
                        "worker": c.worker,
                        "lease": c.lease,
                        "types": sorted(c.types),
                        "sleeping": asleep.get(c, 0),
                    }
                    for inc, c in self._claimants.items()
                    if self._written.get(inc) != asleep.get(c, 0) and inc not in self._retired
                ]
                sweep = self._sweep
            if not batch:
                return
            self._write(
                "idle_sync",
                batch=self._encode(batch),
                sweep=sweep,
                lock_key=self.lock_key,
                channel=self.channel,
            )
            with self._mutex:
                if sweep:
                    self._sweep = False
                for one in batch:
                    self._written[one["incarnation"]] = one["sleeping"]
