"""How a store's idle workers sleep and are woken (both dialects)."""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager

from ..core.store import Claim, Claimant


class _Sleeper:
    """One sleeping thread: its own lock, released once to wake it.

    Taken off the queue by a promise (``reserved``), it is the start's to wake; if its
    sleep runs out first it goes on (``gone``), and the start's claim waits for the next
    wait of a thread of the same claimant."""

    __slots__ = ("claimant", "gone", "lock", "reserved", "types", "until", "woken")

    def __init__(self, types: frozenset[str], claimant: Claimant | None, until: float) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.types = types
        self.claimant = claimant
        self.until = until  # monotonic: when its sleep runs out
        self.woken = False
        self.reserved = False
        self.gone = False

    def wake(self) -> None:  # under the Wakeup's mutex, after leaving its queue
        self.woken = True
        self.lock.release()


class Wakeup:
    """How a store's idle workers sleep: one wake-up rouses one worker (the baton).

    A worker that claims something calls :meth:`nudge` to pass the baton on, so a burst
    is picked up by as many workers as it needs and a single task costs a single claim.

    A nudge with no worker asleep is remembered (one, not a count) and the next
    :meth:`wait` returns at once: otherwise a worker whose claim read just before a commit
    and that goes to sleep just after its notification would sleep through it until the
    safety poll, with the new task due and nobody awake to take it.

    :meth:`wake_all` is for when the notifications themselves may have been lost (the
    watch reconnected, the store closes): it counts an epoch, and a thread's wait returns
    at once when the epoch moved since its last wait returned. So the workers awake at
    that moment (between a claim and their sleep) look again too, not only those asleep.
    A thread's first wait returns at once for the same reason (see ``wait_for_work``).

    :meth:`promise` and :meth:`keep` hand a start made in this process to a worker asleep
    that claims its type, one start a sleeper, so that the store need not tell the other
    processes; with a :class:`Claimant`, the start's commit leases the task to it and
    :meth:`handed` gives it the claim (docs/architecture.md, "A start kept in its
    process").

    :meth:`notify` is how another connection's commit (PostgreSQL's LISTEN) and a claim's
    baton for more work wake a worker: held back while a claim of this process for that
    type is coming or in flight (:meth:`claiming`), since a claim sent after the
    notification sees the notified task, and a worker woken meanwhile would only race it
    for that task.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()  # guards everything below
        # Each sleeping thread waits on a lock of its own, so a wake-up picks the thread it
        # wakes (one that claims a type: ``keep``) and knows it woke it: a thread woken but
        # not yet running is no longer a sleeper a second nudge or promise could count on.
        self._sleepers: deque[_Sleeper] = deque()
        self._missed = False
        # Types a wake-up was for when only workers of other types slept (one of those was
        # woken instead): a worker that claims one of them, awake at that moment, looks
        # again at its next wait rather than sleeping through it.
        self._missed_for: set[str] = set()
        self._epoch = 0
        self._seen = threading.local()  # .epoch: the epoch when this thread last woke
        self._claiming: Counter[str] = Counter()  # the types of the claims under way
        self._held: set[str] = set()  # notified, and no claim sent since
        # Held for a start of this process that told no other process (:meth:`starting`):
        # if no worker of the type here is asleep once the claims under way are done, the
        # other processes are told after all (``announce``, set by the store).
        self._quiet: set[str] = set()
        self.announce: Callable[[Collection[str]], None] | None = None
        # Claims that starts leased to a claimant's workers, each run by its next thread
        # to look (the promised one, unless its sleep ran out before the start's commit).
        self._handed: dict[Claimant, deque[Claim]] = {}
        # How many of a claimant's handed claims no thread was woken for (every one of its
        # threads busy): the next of them to look takes one, asleep or not (``spare``).
        self._spare: Counter[Claimant] = Counter()
        # Called as a thread goes to sleep and as it wakes (outside the mutex): PostgreSQL
        # keeps other processes told how many of each runner's workers sleep (_pgoffer.py).
        self.changed: Callable[[], None] | None = None

    @property
    def sleeping(self) -> int:
        """How many threads sleep now, not yet woken."""
        return len(self._sleepers)

    def wait(
        self, timeout: float, types: Collection[str] = (), claimant: Claimant | None = None
    ) -> bool:
        """Sleep up to ``timeout`` s; True when woken (or a wake-up was missed).
        ``types``: what the caller claims once awake (see :meth:`promise`); ``claimant``:
        who it claims as, for a start that leases its task to it (see :meth:`handed`)."""
        with self._mutex:
            seen = getattr(self._seen, "epoch", None)
            self._seen.epoch = self._epoch
            if seen != self._epoch:
                self._missed = False  # this thread looks again: that was the nudge's ask
                return True  # the first wait, or everyone was woken since the last one
            if self._missed:
                self._missed = False
                return True
            if types and not self._missed_for.isdisjoint(types):
                self._missed_for.difference_update(types)
                return True
            if claimant is not None and self._handed.get(claimant):
                return True  # a start's claim is waiting for this claimant
            me = _Sleeper(frozenset(types), claimant, time.monotonic() + timeout)
            self._sleepers.append(me)
        changed = self.changed
        if changed is not None and claimant is not None:
            changed()
        try:
            me.lock.acquire(timeout=max(timeout, 0.0))
            with self._mutex:
                # Woken by wake_all, this thread has looked at nothing since: the epoch it
                # bumped is the one it has seen.
                self._seen.epoch = self._epoch
                if me.woken:
                    return True  # even if the wake-up came as the timeout ran out
                if me.reserved:
                    me.gone = True  # the start in flight leaves its claim for the next wait
                else:
                    self._sleepers.remove(me)
                return False
        finally:
            if changed is not None and claimant is not None:
                changed()

    def asleep(self) -> Counter[Claimant]:
        """How many threads of each claimant sleep now, not yet woken nor promised."""
        with self._mutex:
            return Counter(s.claimant for s in self._sleepers if s.claimant is not None)

    def sleeps(self) -> dict[frozenset[str], float]:
        """The threads asleep now, by the types they claim: for each set of types, the
        soonest (monotonic) time one of them wakes on its own."""
        with self._mutex:
            soonest: dict[frozenset[str], float] = {}
            for sleeper in self._sleepers:
                until = soonest.get(sleeper.types, sleeper.until)
                soonest[sleeper.types] = min(until, sleeper.until)
            return soonest

    def nudge(self, topics: Collection[str] = ()) -> None:
        """Wake one sleeping worker, or the next one to sleep. With ``topics`` (the types
        the work is of), the first sleeper that claims one of them, if there is one: two
        runners of different types on one store object sleep in one queue, and a worker
        woken for a type it does not claim would leave the task to the safety poll."""
        self._nudge(topics)

    def _nudge(self, topics: Collection[str]) -> bool:
        """:meth:`nudge`; whether the worker it woke claims one of ``topics``."""
        with self._mutex:
            if not self._sleepers:
                self._missed = True
                return False
            sleeper = next(
                (s for s in self._sleepers if not s.types or not s.types.isdisjoint(topics)),
                None,
            )
            if sleeper is None:
                sleeper = self._sleepers[0]
                self._missed_for.update(topics)
            self._sleepers.remove(sleeper)
            sleeper.wake()
            return not sleeper.types or not sleeper.types.isdisjoint(topics)

    def promise(self, type_: str) -> tuple[_Sleeper, Claimant | None] | None:
        """Take a sleeping worker that claims ``type_`` off the queue for a task about to
        be made due (a start of this process), or None if no worker of the type sleeps.
        With it, whom the start may lease its task to: the sleeper's claimant, unless a
        claim of ``type_`` is under way here (a worker finishing an instance claims next in
        the same statement: the start is left to it, or the finish's claim would come
        back empty and its worker go idle while the sleeper ran the start). Each sleeper
        returned is given to one :meth:`keep`, whether or not the task was made."""
        with self._mutex:
            # The longest sleep left: one about to run out (a moment's pause for a
            # contended claim) would go on before the start's commit, leaving the claim
            # to the next thread to look.
            hosts = [sleeper for sleeper in self._sleepers if type_ in sleeper.types]
            if not hosts:
                return None
            sleeper = max(hosts, key=lambda host: host.until)
            self._sleepers.remove(sleeper)
            sleeper.reserved = True
            claimant = sleeper.claimant
            if self._claiming[type_] > 0 or not (claimant and type_ in claimant.types):
                claimant = None
            return sleeper, claimant

    def keep(
        self, sleeper: _Sleeper, type_: str, *, made: bool = True, claim: Claim | None = None
    ) -> None:
        """The start :meth:`promise` took ``sleeper`` for is done: ``claim``, the task it
        leased to the sleeper's claimant, is handed over and the sleeper woken; a task
        made but not leased is left to a claim of ``type_`` under way in this process, or
        else wakes the sleeper, which claims it; nothing made, the sleeper sleeps on."""
        with self._mutex:
            sleeper.reserved = False
            wake = made
            if claim is not None and sleeper.claimant is not None:
                self._handed.setdefault(sleeper.claimant, deque()).append(claim)
            elif made and self._claiming[type_] > 0:
                self._held.add(type_)  # as notify(): the claim under way covers it
                wake = False
            if sleeper.gone:
                # Its thread went on, and its next wait looks; a sleeper of the same
                # claimant runs the claim sooner. A task not leased: that thread claims.
                for other in self._sleepers if claim is not None else ():
                    if other.claimant == sleeper.claimant:
                        self._sleepers.remove(other)
                        other.wake()
                        break
                else:
                    if claim is not None and sleeper.claimant is not None:
                        self._spare[sleeper.claimant] += 1
                return
            if wake:
                sleeper.wake()
            else:
                self._sleepers.appendleft(sleeper)

    def hand(self, claimant: Claimant, claims: Sequence[Claim]) -> int:
        """Hand ``claims``, leased to ``claimant``'s worker, to its threads asleep: one
        claim a thread woken, the longest sleeps first (the timer holder's is the
        shortest). A claim with no thread asleep for it waits for the next of
        ``claimant``'s threads to look (:meth:`wait` returns at once, then
        :meth:`handed`): how many claims wait so is returned."""
        with self._mutex:
            self._handed.setdefault(claimant, deque()).extend(claims)
            hosts = [sleeper for sleeper in self._sleepers if sleeper.claimant == claimant]
            hosts.sort(key=lambda host: host.until, reverse=True)
            for sleeper in hosts[: len(claims)]:
                self._sleepers.remove(sleeper)
                sleeper.wake()
            spare = max(0, len(claims) - len(hosts))
            self._spare[claimant] += spare
            return spare

    def handed(self, claimant: Claimant, *, spare: bool = False) -> Claim | None:
        """One claim a start leased to ``claimant`` (see :meth:`keep`) or a claim handed
        to it (:meth:`hand`), or None. ``spare``: only one that no thread was woken for
        (for a thread that did not sleep: it would take a woken thread's claim, and that
        thread would claim on its own)."""
        with self._mutex:
            claims = self._handed.get(claimant)
            if not claims or (spare and self._spare[claimant] <= 0):
                return None
            claim = claims.popleft()
            if spare:
                self._spare[claimant] -= 1
            if not claims:
                del self._handed[claimant]
                self._spare.pop(claimant, None)
            elif self._spare[claimant] > len(claims):
                self._spare[claimant] = len(claims)
            return claim

    def withdraw(self, claimant: Claimant, claim: Claim) -> bool:
        """Take ``claim`` back from ``claimant`` if none of its threads took it yet (see
        :meth:`hand`); True if it was still waiting."""
        with self._mutex:
            claims = self._handed.get(claimant)
            if not claims or not any(c is claim for c in claims):
                return False
            claims = self._handed[claimant] = deque(c for c in claims if c is not claim)
            if not claims:
                del self._handed[claimant]
                self._spare.pop(claimant, None)
            else:
                self._spare[claimant] = min(max(0, self._spare[claimant] - 1), len(claims))
            return True

    def wake_all(self) -> None:
        """Wake every worker: those asleep now, and every other at its next wait."""
        with self._mutex:
            self._epoch += 1
            while self._sleepers:
                self._sleepers.popleft().wake()

    def notify(self, *topics: str) -> None:
        """Work of one of ``topics`` may be due (a type's name, or a word such as
        ``release``): another connection's commit, or the baton of a claim that saw more.
        Wake a worker, unless a claim is under way in this process for each of them. Then
        the notification is held: a claim sent after it covers it (its snapshot holds the
        notified commit), and once every claim under way for a topic still held has
        returned with none sent since, a worker is woken after all. Woken at once, it
        raced the claim whose commit was about to take the task: in PostgreSQL end-to-end
        runs that was an empty claim, then a contended sleep and another empty claim."""
        with self._mutex:
            if topics and all(self._claiming[t] > 0 for t in topics):
                self._held.update(topics)
                return
        self.nudge(topics)

    @contextmanager
    def claiming(self, types: Sequence[str]) -> Iterator[Callable[[], None]]:
        """Around a claim of ``types``, or a commit followed by one: the claim is under way.
        Call the ``sent`` it yields just before the claim statement goes out. On the way
        out, the notifications held for types no claim is under way for any more wake a
        worker; so does a claim that raised (it may have covered a notification)."""
        kinds = set(types)

        def sent() -> None:
            with self._mutex:
                self._held -= kinds
                self._quiet -= kinds

        with self._mutex:
            self._claiming.update(kinds)
        finished = False
        try:
            yield sent
            finished = True
        finally:
            self._let_go(kinds, finished)

    @contextmanager
    def starting(self, type_: str) -> Iterator[Callable[[], None] | None]:
        """Around the commit of a start of ``type_`` due now that no worker here was
        promised: yields ``made`` if a claim of the type is under way in this process, and
        the start need not tell the other processes (call it once the task is made), else
        None. Told, each process's idle worker would claim, one to take the task and the
        others to find nothing. Untold, it is held as a notification is (:meth:`notify`):
        a claim sent after the commit sees it; else, once the claims under way are done,
        a worker here is woken for it, and if none of the type is asleep the other
        processes are told after all (``announce``). The start counts as a claim under
        way meanwhile, so that one finishing before its commit does not let go early."""
        kinds = {type_}

        def made() -> None:
            with self._mutex:
                self._held.add(type_)
                self._quiet.add(type_)

        with self._mutex:
            quiet = self._claiming[type_] > 0
            self._claiming.update(kinds)
        finished = False
        try:
            yield made if quiet else None
            finished = True
        finally:
            self._let_go(kinds, finished)

    def _let_go(self, kinds: set[str], finished: bool) -> None:
        """The end of a claim (or start) of ``kinds``: the notifications held for types
        no claim is under way for any more wake a worker; so does a claim that raised
        (it may have covered a notification)."""
        with self._mutex:
            self._claiming.subtract(kinds)
            free = {t for t in self._held if self._claiming[t] <= 0}
            self._held -= free
            loud = free & self._quiet
            self._quiet -= free
            for t in kinds:
                if self._claiming[t] <= 0:
                    del self._claiming[t]
        if free or not finished:
            woke = self._nudge(free or kinds)
            if loud and not woke and self.announce is not None:
                self.announce(loud)
