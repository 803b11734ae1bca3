"""How many of the node tasks a runner's DAG commit dispatches it keeps to itself.

On PostgreSQL a DAG commit's dispatched tasks are its runner's alone for ``dag_sticky``
seconds (migration 024; docs/architecture.md, "A DAG instance's tasks kept to their
runner"): other runners pass them over, so they do not share the instance's commits. That
pays where the runner drains them quickly (fast nodes), and costs where it cannot: a
fan-out of 64 slow branches kept to eight workers waited the whole window while other
runners slept. So a runner keeps only the tasks its own workers will start within the
window, by what it measured, and leaves the rest to anyone at once.

:class:`Keeper` holds two measures: the seconds a node's work keeps a worker (an
exponential average of its handler's time, by what the node does: :func:`work`, the
function a ``python`` node calls, say, in whichever definition), and a backlog, the seconds
of work of the tasks it kept that its workers have not yet worked off (each kept task adds
its work's average over the workers; wall time drains it). A commit keeps its dispatched
tasks in order while they fit in the window above the backlog.

Work this runner has not measured yet counts as none, so a commit keeps it (a fast node's
commit is what keeping saves). It is kept blind: once the first node of that work is
measured, :meth:`Keeper.ran` says, for each instance it was kept blind on, how many of its
tasks the runner can still start within the window, and the executor gives the rest
back to any runner (``Store.dag_unkeep``). Fast work gives nothing back and costs no
statement. An estimate, not a promise: a task kept too long is only late, never lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core.dag_interpret import DagDecision
from ..definition.dag_models import Graph

WEIGHT = 0.2
"""The weight of a new measure in a node's average (the older ones share the rest)."""

EPSILON = 1e-9
"""Sums of floats: a window filled exactly is not overfilled."""


def work(graph: Graph, node: str) -> str:
    """What ``node`` of ``graph`` does, the key of its measure: a ``python`` node's
    function, a ``data_query`` node's query, else the node's type."""
    kind = graph.nodes[node].type
    name = getattr(graph.config(node), "function" if kind == "python" else "query", "")
    return f"{kind}:{name}" if isinstance(name, str) and name else kind


@dataclass(frozen=True, slots=True)
class _Blind:
    """Tasks of unmeasured work a commit kept on an instance."""

    instance_id: str
    count: int
    at: float


class Keeper:
    """A runner's measure of its DAG nodes, and how many dispatched tasks it keeps.

    Args:
        workers: the runner's worker threads.
        window: the store's ``dag_sticky`` now, in seconds (read at each commit: tests and
            operators may change it).
        clock: seconds, monotonic.
    """

    def __init__(
        self,
        workers: int,
        window: Callable[[], float],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._workers = max(1, workers)
        self._window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._mean: dict[str, float] = {}
        self._blind: dict[str, list[_Blind]] = {}
        self._backlog = 0.0
        self._at = clock()

    def ran(self, work: str, seconds: float) -> list[tuple[str, int]]:
        """A node doing ``work`` (:func:`work`) kept a worker ``seconds``. The first
        measure of a work kept blind returns, for each instance it was kept on, how many
        of its kept tasks the runner can still start within the window: the rest are to
        be given back (``Store.dag_unkeep``)."""
        with self._lock:
            mean = self._mean.get(work)
            self._mean[work] = seconds if mean is None else mean + WEIGHT * (seconds - mean)
            blind = self._blind.pop(work, [])
            if not blind:
                return []
            now = self._drain()
            each = self._mean[work] / self._workers
            window = self._window()
            out = []
            for kept in blind:
                left = window - (now - kept.at)
                if left <= 0:
                    continue  # over: anyone's now
                room = max(0.0, left - self._backlog)
                fits = room >= kept.count * each  # all of them (a division may overflow)
                can = kept.count if fits else int(room / each + EPSILON)
                self._backlog += can * each
                if can < kept.count:
                    out.append((kept.instance_id, can))
            return out

    def keep(self, works: Sequence[str], instance_id: str = "") -> tuple[int | None, float]:
        """How many of the tasks a commit on ``instance_id`` dispatches, doing ``works``
        in their order, this runner keeps (the first ones; None: all), and the seconds of
        work they add to its backlog: given back by :meth:`give_back` if the commit does
        not land."""
        window = self._window()
        if not works or window <= 0:
            return None, 0.0
        with self._lock:
            now = self._drain()
            kept, added = 0, 0.0
            blind: dict[str, int] = {}
            for item in works:
                mean = self._mean.get(item)
                each = (mean or 0.0) / self._workers
                if self._backlog + added + each > window + EPSILON:
                    break
                kept, added = kept + 1, added + each
                if mean is None:
                    blind[item] = blind.get(item, 0) + 1
            self._backlog += added
            if instance_id:
                for item, count in blind.items():
                    # Those kept longer ago than the window are anyone's by now.
                    was = [b for b in self._blind.get(item, ()) if now - b.at < window]
                    self._blind[item] = [*was, _Blind(instance_id, count, now)]
        return (None if kept == len(works) else kept), added

    def for_commit(
        self, graph: Graph | None, decision: DagDecision, instance_id: str, *, handed: bool
    ) -> tuple[int | None, float]:
        """:meth:`keep` for the tasks ``decision`` dispatches on ``instance_id``: nothing
        is counted when the commit hands its one task to its own worker (``handed``:
        leased to it, not kept) or the instance's graph is not known here."""
        if handed or graph is None:
            return None, 0.0
        return self.keep([work(graph, t.node) for t in decision.dispatch], instance_id)

    def give_back(self, seconds: float) -> None:
        """Work :meth:`keep` counted that was never written (a lost commit)."""
        if seconds > 0:
            with self._lock:
                self._backlog = max(0.0, self._backlog - seconds)

    def _drain(self) -> float:
        """Work off the backlog up to now (under the lock); now."""
        now = self._clock()
        self._backlog = max(0.0, self._backlog - (now - self._at))
        self._at = now
        return now
