"""A worker's run of a fan-out's branches, committed together.

A fan-out's branch commits its completion and takes the next due branch of its instance
for its worker in that commit (``dag_commit(take="sibling")``): one statement a branch.
Where the store commits groups, the commit takes instead as many due branches as fit in
:data:`BUDGET` of node time, by what the branch just run took (at most :data:`RUN`). The
worker runs them one after another, queues each plain completion instead of committing
it, and commits the queue in one statement (``Grouper.submit_many``: each decided in turn
on the view with the ones before folded in, :func:`~..core.dag_group.decide`), which
takes its next run. What is not a plain completion (a failure, a timer, a child's wait)
commits as it always does, on its own. Each branch of a run counts towards the worker's
streak (``operations.STREAK``), which a run never passes.

Nothing is lost by the wait: a taken branch is leased, its ``NODE_STARTED`` written, as
a claim leaves it. A branch that has run but whose completion is not yet committed is,
if the process dies, run again once its lease runs out, as after any crash between a
node's run and its commit. A worker whose run stops on an error commits what it queued
and gives back the branches it did not run (the runner's heartbeat would keep their
leases alive). docs/architecture.md, "A worker's run of branches".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

from ..core.store import Claim
from .dag_cache import Pending
from .dag_group import Grouper
from .operations import STREAK

log = logging.getLogger("statemachine_wf.dag")

RUN = 8
"""The most branches one commit takes for one worker."""

BUDGET = 0.002
"""Seconds of node time a run holds, by what its worker's last branch took: a run's
completion waits for the branches after it to run, about this long at most, against the
statement it saves (about 1 ms of the server's and the runner's time here). A branch
that takes this long or more is taken one at a time, so slow branches spread over every
worker as before."""


class BranchRuns:
    """One executor's runs of branches; ``local`` is its per-worker state (``streak``,
    ``node_seconds``: what its last node function took).

    Args:
        run: runs one node task, queuing a plain completion on the list it is given.
        node: the observer's context around one node task.
        group: the executor's group commit (None: the store commits none, and no run).
        unrun: releases a claim this worker will not run.
        free: whether the worker may take its next node in a commit (its streak).
    """

    def __init__(
        self,
        local: threading.local,
        *,
        run: Callable[[Claim, list[Pending]], object],
        node: Callable[[Claim], AbstractContextManager[object]],
        group: Grouper | None,
        unrun: Callable[[Claim], None],
        free: Callable[[], bool],
    ) -> None:
        self._local = local
        self._run, self._node, self._group = run, node, group
        self._unrun, self._free = unrun, free

    def want(self) -> int:
        """How many due siblings the calling worker's commit takes: as many as its last
        node function's time fits in :data:`BUDGET`, at most :data:`RUN`, never past its
        streak; one without group commit."""
        local = self._local
        seconds: float | None = getattr(local, "node_seconds", None)
        if self._group is None or seconds is None:
            return 1
        fits = int(BUDGET / max(seconds, 1e-6))
        return max(1, min(RUN, fits, STREAK - getattr(local, "streak", 0)))

    def carry_on(self, taken: list[Claim]) -> list[Claim]:
        """After a commit took ``taken`` for this worker: while it took several, run them
        as a run, and the run its commit takes; the one (or none) left is the runner's to
        run next (without group commit, a commit takes one at most: :meth:`want`)."""
        group = self._group
        while group is not None and len(taken) > 1:
            taken = self._run_branches(group, taken)
        return taken

    def _run_branches(self, group: Grouper, claims: list[Claim]) -> list[Claim]:
        """Run ``claims`` (one instance's branches, leased to this worker) in turn, commit
        their plain completions together; the branches that commit took for it."""
        local = self._local
        instance_id = claims[0].instance.id
        queued: list[Pending] = []
        ran = 0
        try:
            for claim in claims:
                local.streak = getattr(local, "streak", 0) + 1
                ran += 1
                with self._node(claim):
                    self._run(claim, queued)
        except BaseException:
            for claim in claims[ran:]:
                self._unrun(claim)
            if queued:
                queued[-1].free = False
                self._commit_all(group, instance_id, queued)
            raise
        if not queued:
            return []
        last = queued[-1]
        last.free, last.want = self._free(), self.want()
        error = self._commit_all(group, instance_id, queued)
        if error is not None:
            raise error
        return [last.claim, *last.more] if last.claim is not None else []

    @staticmethod
    def _commit_all(group: Grouper, instance_id: str, queued: list[Pending]) -> Exception | None:
        """Commit ``queued``; the first error of its items (the others logged), or None."""
        group.submit_many(instance_id, queued)
        errors = [item.error for item in queued if item.error is not None]
        for error in errors[1:]:
            log.warning("instance %s: a branch's commit failed: %r", instance_id, error)
        return errors[0] if errors else None
