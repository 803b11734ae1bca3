"""A runner's DAG node completions on one instance, committed together (group commit).

A runner's threads commit on an instance one at a time (its cache entry's lock), and a
fan-out's branches are one instance's: while one thread commits a branch, the others
that finished one wait for it, and each then sent its own statement (a fan-out node cost
about one commit). Now a thread that finishes a node queues its completion on the entry
(:class:`~.dag_cache.Pending`), and the thread that takes the entry's lock next commits every
completion queued there in one statement: each decided in turn on the view with the ones
before it folded in (:func:`~..core.dag_group.decide`), merged into one decision
(``also_done``), and each free worker of the group leased its next branch in that same
statement (``Store.dag_commit(siblings=n)``), or the node the last completion hands off.
The others find their completion committed, and their next branch, when they get the
lock. docs/architecture.md, "A fan-out's branches committed together".

Only while the runner has the instance to itself (no lost CAS, no commit on a later
version): a group commits on the exact version it was decided on. Otherwise, and for
anything :func:`~..core.dag_group.joins` refuses, each completion commits alone, as
before. A completion that writes nothing, or a group that lost its CAS, is decided again
alone, on a read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

from ..core.dag_group import decide, merge
from ..core.dag_interpret import LogView, hand_off, takes_sibling
from ..core.store import Claim, DagCommit, DagSnapshot, InstanceRecord, Store
from ..errors import ConcurrencyConflict
from .dag_cache import Cached, DagCache, Make, Pending
from .dag_keep import Keeper

log = logging.getLogger("statemachine_wf.dag")


Alone = Callable[[Cached, str, Pending], None]
"""Commits one queued completion by itself (the executor's lone commit), filling it in."""


class Grouper:
    """Queues a runner's completions per instance and commits them in groups.

    Args:
        cache: the executor's cache (its entries hold the queues).
        store: the runner's store; ``store.dag_group_most`` caps a group.
        alone: the executor's lone commit of one queued completion, under the entry's lock.
        keeper: how many of a commit's dispatched tasks the runner keeps (``dag_keep``).
    """

    def __init__(
        self,
        cache: DagCache,
        store: Store,
        alone: Alone,
        *,
        worker: str,
        lease: float,
        incarnation: str,
        keeper: Keeper,
    ) -> None:
        self._cache = cache
        self._keeper = keeper
        self._store = store
        self._alone = alone
        self._worker = worker
        self._lease = lease
        self._incarnation = incarnation
        self._most = store.dag_group_most

    def submit(self, instance_id: str, make: Make, free: bool, want: int = 1) -> Pending:
        """Commit ``make``'s completion, with whatever else is queued on the instance when
        this thread gets its lock (unless a thread before it committed this one too).
        With the lock free, nothing waits: it commits at once (a chain's nodes always).
        ``want``: the siblings its worker takes when free (:class:`Pending`)."""
        item = Pending(make, free, want)
        entry = self._cache.entry(instance_id)
        if entry.lock.acquire(blocking=False):
            batch = [item]
        else:
            with entry.queue_lock:
                entry.queue.append(item)
            entry.lock.acquire()
            batch = []
        try:
            if not item.done:
                with entry.queue_lock:
                    batch += entry.queue
                    entry.queue = []
                if item not in batch:  # Pending has no __eq__: by identity
                    # Taken from the queue by a thread that stopped before committing it
                    # (only a BaseException does that): committed here, as if alone.
                    batch.insert(0, item)
                while batch:
                    batch = self._commit_some(entry, instance_id, batch)
        finally:
            entry.lock.release()
        if item.error is not None:
            raise item.error
        return item

    def submit_many(self, instance_id: str, items: list[Pending]) -> None:
        """Commit one worker's ``items`` (its run of branches, :mod:`.dag_batch`), in
        order, with whatever else is queued on the instance; each item's outcome is
        filled in (``done``, ``result``, ``error``, its claims), none raised."""
        entry = self._cache.entry(instance_id)
        with entry.lock:
            with entry.queue_lock:
                batch = [*items, *entry.queue]
                entry.queue = []
            while batch:
                batch = self._commit_some(entry, instance_id, batch)

    def _commit_some(self, entry: Cached, instance_id: str, batch: list[Pending]) -> list[Pending]:
        """Commit the first of ``batch`` and as many after it as may share its commit;
        the rest, to commit next. An error is its completions' own: each queued thread
        raises it, as from a lone commit."""
        state, view = entry.state, entry.view
        group = []
        alone = entry.contended or entry.behind  # others commit on it: exact CAS only
        if len(batch) > 1 and state is not None and view is not None and not alone:
            try:
                items = [(i, _on(state.instance, i.make)) for i in batch]
                group = decide(items, state.open_slots, view, self._most)
            except Exception:
                group = []  # decided again alone, where the error is the first's own
        if len(group) < 2 or state is None or view is None:
            first = batch[0]
            try:
                self._alone(entry, instance_id, first)
            except Exception as exc:
                first.done, first.error = True, exc
            return batch[1:]
        members = [item for item, _ in group]
        decision = merge([d for _, d in group])
        last = members[-1]
        handed = hand_off(decision) if last.free else None
        free = [item for item in members if item.free]
        take: Literal["handed", "sibling"] | None = None
        if handed is not None:
            decision, take = handed, "handed"
        elif free and takes_sibling(decision):
            take = "sibling"
        version = state.instance.version
        graph = entry.graph
        keep, kept = self._keeper.for_commit(graph, decision, instance_id, handed=take == "handed")
        try:
            applied = self._store.dag_commit(
                DagCommit(instance_id, version, decision, self._worker),
                take=take,
                lease=self._lease,
                incarnation=self._incarnation,
                siblings=min(self._most, sum(i.want for i in free)) if take == "sibling" else 1,
                keep=keep,
            )
        except ConcurrencyConflict:
            self._keeper.give_back(kept)
            entry.contended = True  # another runner committed: each alone now, on a read
            log.debug("instance %s: a group of %d lost its CAS", instance_id, len(members))
            return batch
        except Exception as exc:
            self._keeper.give_back(kept)
            for item in members:
                item.done, item.error = True, exc
            return batch[len(members) :]
        instance = self._cache.fold(entry, state, decision, applied)
        taken = [Claim(t, instance, started=True) for t in (applied.task, *applied.more) if t]
        for item in members:
            item.done, item.result = True, True
        if handed is not None:
            last.claim = taken[0] if taken else None
        else:
            share(free, taken)
        return batch[len(members) :]


def share(takers: list[Pending], taken: list[Claim]) -> None:
    """Give the siblings a commit took to its free workers in order: one each first, then
    the rest to those that want several (their ``more``)."""
    for item, claim in zip(takers, taken, strict=False):
        item.claim = claim
    rest = iter(taken[len(takers) :])
    for item in takers:
        item.more = [c for _, c in zip(range(item.want - 1), rest, strict=False)]


def _on(instance: InstanceRecord, make: Make) -> Callable[[tuple[str, ...], LogView], Any]:
    """``make`` deciding on ``instance`` with the open node tasks it is given."""
    return lambda slots, view: make(DagSnapshot(instance, [], slots), view)


def free_of_others(entry: Cached) -> bool:
    """Take ``entry``'s lock if no other thread of the runner holds it or waits to commit
    (True: taken, to release)."""
    if not entry.lock.acquire(blocking=False):
        return False
    if entry.queue:  # completions waiting for it: committed with this one (Grouper)
        entry.lock.release()
        return False
    return True
