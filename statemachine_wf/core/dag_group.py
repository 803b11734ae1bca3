"""Several node completions of one DAG instance decided for one commit (group commit).

A runner's threads commit on an instance one at a time, and a fan-out's branches are one
instance's: while one thread commits, the others that finished a branch wait for it. The
runner queues their completions and commits them together (``runtime.dag_group``). This
module is the pure part: which completions may share a commit, deciding each in turn on
the view with the ones before it folded in (:meth:`LogView.with_completion`), and the
one decision they make together (:func:`merge`). Pure, like :mod:`.dag_interpret`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from ..definition.events import Ev
from .dag_interpret import DagDecision, LogView, open_after, settles

T = TypeVar("T")

Decide = Callable[[tuple[str, ...], LogView], DagDecision | None]
"""Decides a completion on the instance's open node tasks and folded log (None: nothing
to write)."""


def joins(decision: DagDecision) -> bool:
    """Whether ``decision`` may share a commit with the completions decided before it: a
    node's ``NODE_COMPLETED`` (first) and what follows from it, nothing that ends the
    instance, sets its status, retries a node or writes a dead letter."""
    events = decision.events
    return (
        not settles(decision)
        and decision.dead_letter is None
        and decision.done is not None
        and not decision.also_done
        and bool(events)
        and events[0].event_type == Ev.NODE_COMPLETED
        and events[0].node == decision.done
    )


def decide(
    items: Sequence[tuple[T, Decide]], open_slots: tuple[str, ...], view: LogView, most: int
) -> list[tuple[T, DagDecision]]:
    """The longest prefix of ``items`` (at most ``most``) that one commit may carry, each
    decided on ``open_slots`` and ``view`` with the ones before it applied. Each one after the
    first is decided on a copy of the view with the earlier completions folded in, so
    only a plain completion (its ``NODE_COMPLETED`` alone: a fan-out's branch whose join is
    not ready) may have another after it; one that dispatches ends the group. The prefix
    stops before an item that writes nothing or may not join (:func:`joins`): that one
    is decided again on its own, after the group's commit."""
    group: list[tuple[T, DagDecision]] = []
    for key, make in items[:most]:
        decision = make(open_slots, view)
        if decision is None or not joins(decision):
            break
        group.append((key, decision))
        if decision.dispatch or len(decision.events) != 1:
            break
        view = view.with_completion(decision.events[0])
        open_slots = open_after(open_slots, decision)
    return group


def merge(decisions: Sequence[DagDecision]) -> DagDecision:
    """The one decision of several that :func:`decide` made in turn: their events in
    order, their dispatches, every completed node's task gone (``done`` and
    ``also_done``)."""
    first, rest = decisions[0], decisions[1:]
    return DagDecision(
        events=tuple(e for d in decisions for e in d.events),
        dispatch=tuple(t for d in decisions for t in d.dispatch),
        done=first.done,
        also_done=tuple(d.done for d in rest if d.done is not None),
    )
