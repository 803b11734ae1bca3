"""A loop node's iteration state, read off an instance's folded log (pure).

What the executor hands a ``loop`` node's handler (:class:`~.dag_handlers.LoopState`):
whether it was entered or reached back from its body, its own previous output, what the
body produced, and, once a round's last iteration has ended, every iteration's result.
"""

from __future__ import annotations

from typing import Any

from ..core.dag_interpret import Completion, LogView
from ..definition.dag_models import Graph
from .dag_handlers import LoopState


def iteration(graph: Graph, view: LogView, node: str, run: int) -> LoopState | None:
    """The state of ``node``'s run ``run`` when it is a loop (None for any other node)."""
    if graph.nodes[node].type != "loop":
        return None
    dispatched = view.dispatch(node, run)
    if dispatched is None or dispatched.via != "back":
        return LoopState(entry=True, previous=None, result=None)
    prev = view.completion(node, run - 1)
    results = {}
    for edge in graph.incoming[node]:
        if graph.is_back(edge):
            done = view.completions.get(edge.source, [])
            results[edge.source] = done[-1].output if done else None
    result = next(iter(results.values())) if len(results) == 1 else results
    previous = prev.output if prev is not None and isinstance(prev.output, dict) else None
    if previous is None:
        return LoopState(entry=True, previous=None, result=result)
    start = int(previous.get("start", run - 1))
    first = previous if start == run - 1 else _output(view.completion(node, start))
    items = first.get("items")
    items = items if isinstance(items, list) else None
    gathered = None
    if items is not None and int(previous.get("index", -1)) + 1 >= len(items):
        # The round's last iteration has ended: gather each iteration's result, once.
        if "results" in previous:  # a round begun by a version that logged them all
            gathered = [*previous["results"], result]
        else:
            gathered = [
                _output(c).get("result")
                for c in view.completions.get(node, ())
                if start < c.run < run
            ]
            gathered.append(result)
    return LoopState(entry=False, previous=previous, result=result, items=items, results=gathered)


def _output(completion: Completion | None) -> dict[str, Any]:
    out = completion.output if completion is not None else None
    return out if isinstance(out, dict) else {}
