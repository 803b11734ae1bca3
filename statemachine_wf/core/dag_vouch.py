"""Which open node tasks vouch for a DAG decision on a later version of its instance.

A commit is gated by the instance's version (the CAS): made on the version it was decided
on, nothing it did not see can have changed. A fan-out's branches running in several
runner processes lose nearly every CAS to each other that way, and each loser reads and
decides again for a decision that comes out the same (bench/README.md, "Session 30").
:func:`blockers` names, for the decisions where that is so, the open tasks whose being
open is all the decision depends on besides the instance still running: the store commits
it on a later version while one of them is (``DagCommit.blockers``, ``dag_head_relaxed``).
Pure, like :mod:`.dag_interpret`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..definition.dag_models import Graph
from ..definition.events import Ev
from .dag_interpret import DagDecision, LogView, settles


def blockers(
    graph: Graph, view: LogView, decision: DagDecision, open_slots: Sequence[str]
) -> tuple[str, ...]:
    """The open node tasks that vouch for ``decision`` on a newer version of the instance:
    while one of them is still open, the decision is what a fresh read would decide too,
    so the store may commit it although other commits moved the version (a fan-out's
    branches in several runner processes, which otherwise lose nearly every CAS to each
    other). Empty when the decision needs the version it was made on.

    Only a plain completion qualifies: the node's ``NODE_COMPLETED``, nothing dispatched,
    nothing settled, outside any loop. Nothing else in it reads the rest of the log but
    two facts, and an open task vouches for both (a node's completion deletes its task
    in the same commit): the instance still has work (so it does not complete here), and
    the one ``all`` join this completion feeds is still not ready (one of its other
    inputs has not completed). Its other targets must have been entered already, which
    outside loops is for good. The store checks the node's own task and one of these
    under the instance's row lock, and that the instance still runs.
    """
    node = decision.done
    if (
        node is None
        or decision.also_done  # a group: commits on the version it was decided on
        or decision.dispatch
        or settles(decision)
        or decision.dead_letter is not None
        or len(decision.events) != 1
        or decision.events[0].event_type != Ev.NODE_COMPLETED
        or decision.events[0].node != node
        or graph.scope[node] is not None
        or graph.nodes[node].type == "loop"
    ):
        return ()
    handle = decision.events[0].payload.get("handle")
    waiting: str | None = None  # the one target not entered yet: an `all` join
    for target in dict.fromkeys(graph.targets(node, handle)):
        if graph.joins[target][1] or graph.scope[target] is not None:
            return ()
        if any(d.via == "entry" for d in view.dispatches.get(target, ())):
            continue
        if graph.nodes[target].join != "all" or waiting is not None:
            return ()
        waiting = target
    others = [s for s in open_slots if s != node]
    if waiting is None:
        return tuple(others)
    inputs = {e.source for e in graph.joins[waiting][0] if e.source != node}
    return tuple(s for s in others if s in inputs)
