"""DAG definitions and their validation: :func:`check` decides whether a definition can
be run and returns its :class:`Graph`; :func:`load` and :class:`DagBuilder` make checked
definitions.

A definition is plain data (the pydantic models of :mod:`.dag_definition`, re-exported
here), loadable from the editor's JSON with :func:`load` (read by :mod:`.dag_loading`) or
written in Python (see :class:`DagBuilder`). Nothing here runs a node: :func:`check` only
decides whether a definition can be run, and :class:`Graph` is the derived shape the
interpreter reads (incoming edges, handles, loop bodies).

Validation collects every problem before raising one :class:`DefinitionError`:
unknown node types, bad node configs, duplicate ids, dangling edges, no (or two) start
nodes, no end node, handles a node cannot produce, nodes the start cannot reach, and a
cycle not made by a loop node.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import DefinitionError
from .dag_definition import DEFAULT_DAG_TYPE as DEFAULT_DAG_TYPE
from .dag_definition import DONE_HANDLE as DONE_HANDLE
from .dag_definition import ELSE_HANDLE as ELSE_HANDLE
from .dag_definition import ERROR_HANDLE as ERROR_HANDLE
from .dag_definition import LOOP_HANDLE as LOOP_HANDLE
from .dag_definition import NODE_CONFIGS as NODE_CONFIGS
from .dag_definition import Branch as Branch
from .dag_definition import ConditionConfig as ConditionConfig
from .dag_definition import DagDefinition as DagDefinition
from .dag_definition import DataQueryConfig as DataQueryConfig
from .dag_definition import DelayConfig as DelayConfig
from .dag_definition import Edge as Edge
from .dag_definition import EndConfig as EndConfig
from .dag_definition import ErrorHandling as ErrorHandling
from .dag_definition import JoinMode as JoinMode
from .dag_definition import LoopConfig as LoopConfig
from .dag_definition import Node as Node
from .dag_definition import NodeRetry as NodeRetry
from .dag_definition import Position as Position
from .dag_definition import PythonConfig as PythonConfig
from .dag_definition import StartConfig as StartConfig
from .dag_definition import SubWorkflowConfig as SubWorkflowConfig
from .dag_definition import _config_problems as _config_problems
from .dag_definition import _Model as _Model
from .dag_definition import produced_handles as produced_handles
from .dag_loading import _json_size as _json_size
from .dag_loading import _where as _where
from .dag_loading import check_size as check_size
from .dag_loading import parse as parse

# -- the derived graph ------------------------------------------------------------------


@dataclass(frozen=True)
class Graph:
    """A checked definition with the indexes the interpreter needs."""

    definition: DagDefinition
    nodes: Mapping[str, Node]
    configs: Mapping[str, BaseModel]
    start: str
    ends: frozenset[str]
    incoming: Mapping[str, tuple[Edge, ...]]
    outgoing: Mapping[str, tuple[Edge, ...]]
    bodies: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Loop node -> the nodes of its body (reachable from ``loop`` and leading back)."""

    # An edge into a loop node from its own body closes an iteration. check() refuses
    # every other cycle, so the graph without these edges is acyclic.
    @cached_property
    def back_edges(self) -> frozenset[tuple[str, str, str | None]]:
        found = set()
        for loop, body in self.bodies.items():
            for e in self.incoming[loop]:
                if e.source in body:
                    found.add(_key(e))
        return frozenset(found)

    def is_back(self, edge: Edge) -> bool:
        return _key(edge) in self.back_edges

    @cached_property
    def joins(self) -> Mapping[str, tuple[tuple[Edge, ...], tuple[Edge, ...]]]:
        """Node -> its incoming edges split once: (entry edges, back edges).

        The interpreter asks whether a node is ready on every completion of a branch
        into it; split there, a 100-branch join cost 100 edge lookups per branch.
        """
        back = self.back_edges
        return {
            node: (
                tuple(e for e in edges if _key(e) not in back),
                tuple(e for e in edges if _key(e) in back),
            )
            for node, edges in self.incoming.items()
        }

    def shared_loop(self, edge: Edge) -> str | None:
        """The innermost loop holding both ends of ``edge`` (a loop's own edges into its
        body count as inside it), None when they share none: the iteration a firing of
        the edge counts in (the interpreter's join barrier)."""
        return self._shared_loops[_key(edge)]

    @cached_property
    def _shared_loops(self) -> Mapping[tuple[str, str, str | None], str | None]:
        def holding(node: str) -> list[str]:  # innermost first
            chain, cur = [], self.scope[node]
            while cur is not None:
                chain.append(cur)
                cur = self.scope[cur]
            return chain

        out: dict[tuple[str, str, str | None], str | None] = {}
        for edges in self.incoming.values():
            for e in edges:
                around_source = set(holding(e.source))
                if self.nodes[e.source].type == "loop":
                    around_source.add(e.source)
                shared = (loop for loop in holding(e.target) if loop in around_source)
                out[_key(e)] = next(shared, None)
        return out

    @cached_property
    def scope(self) -> Mapping[str, str | None]:
        """Node -> the innermost loop whose body holds it (None at the top level)."""
        out: dict[str, str | None] = {}
        # A nested loop's body lies inside its outer loop's body, so the smallest body
        # holding a node is its innermost loop.
        for node in self.nodes:
            holders = [lp for lp, body in self.bodies.items() if node in body]
            out[node] = min(holders, key=lambda lp: len(self.bodies[lp])) if holders else None
        return out

    def targets(self, node: str, handle: str | None) -> list[str]:
        return [e.target for e in self.outgoing[node] if e.source_handle == handle]

    def config(self, node: str) -> BaseModel:
        return self.configs[node]


# check() and its helpers look _key up in this module on each call, so they live here
# with it: tests count the calls by patching statemachine_wf.definition.dag_models._key.
def _key(edge: Edge) -> tuple[str, str, str | None]:
    return (edge.source, edge.target, edge.source_handle)


def _reach(start: Iterable[str], succ: Mapping[str, Iterable[str]], avoid: str = "") -> set[str]:
    seen: set[str] = set()
    stack = [s for s in start if s != avoid]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(t for t in succ.get(n, ()) if t != avoid and t not in seen)
    return seen


def check(definition: DagDefinition) -> Graph:
    """Validate ``definition`` and return its :class:`Graph`.

    Raises:
        DefinitionError: listing every problem found.
    """
    problems: list[str] = []
    nodes: dict[str, Node] = {}
    configs: dict[str, BaseModel] = {}
    for node in definition.nodes:
        # The first node with an id stands for it; a later one is reported, not checked,
        # so one mistake does not cascade into a list of edge problems.
        if node.id in nodes:
            problems.append(f"node {node.id!r}: duplicate id")
            continue
        nodes[node.id] = node
        model = NODE_CONFIGS.get(node.type)
        if model is None:
            problems.append(
                f"node {node.id!r}: unknown type {node.type!r} (known: {', '.join(NODE_CONFIGS)})"
            )
            continue
        try:
            configs[node.id] = model.model_validate(node.config)
        except ValidationError as exc:
            for err in exc.errors():
                where = ".".join(str(p) for p in err["loc"]) or "config"
                problems.append(f"node {node.id!r}: config.{where}: {err['msg']}")
            continue
        problems.extend(_config_problems(node, configs[node.id]))

    starts = [n.id for n in nodes.values() if n.type == "start"]
    ends = [n.id for n in nodes.values() if n.type == "end"]
    if not starts:
        problems.append("no start node")
    elif len(starts) > 1:
        problems.append(f"more than one start node: {sorted(starts)}")
    if not ends:
        problems.append("no end node")

    incoming: dict[str, list[Edge]] = {n: [] for n in nodes}
    outgoing: dict[str, list[Edge]] = {n: [] for n in nodes}
    seen_edges: set[tuple[str, str, str | None]] = set()
    for edge in definition.edges:
        label = f"edge {edge.source!r} -> {edge.target!r}"
        dangling = [end for end in (edge.source, edge.target) if end not in nodes]
        if dangling:
            problems.append(f"{label}: unknown node(s) {dangling}")
            continue
        # A loop goes through its body nodes; an edge from a node to itself would be a
        # cycle no loop node counts or bounds.
        if edge.source == edge.target:
            problems.append(f"{label}: a node cannot feed itself")
            continue
        if _key(edge) in seen_edges:
            problems.append(f"{label}: duplicate edge")
            continue
        seen_edges.add(_key(edge))
        src = nodes[edge.source]
        # The start node runs once, when the instance is created: nothing may lead back.
        if nodes[edge.target].type == "start":
            problems.append(f"{label}: the start node cannot have incoming edges")
        # Handles are known only for a node whose config is valid; a bad config has been
        # reported already and its edges are not judged on a guess.
        if src.id in configs:
            handles = produced_handles(src, configs[src.id])
            if not handles:
                problems.append(f"{label}: an end node cannot have outgoing edges")
            elif edge.source_handle not in handles:
                shown = sorted("<default>" if h is None else h for h in handles)
                problems.append(
                    f"{label}: {src.type} node {src.id!r} cannot produce handle "
                    f"{edge.source_handle!r} (it produces {shown})"
                )
        incoming[edge.target].append(edge)
        outgoing[edge.source].append(edge)

    succ = {n: [e.target for e in outgoing[n]] for n in nodes}
    pred = {n: [e.source for e in incoming[n]] for n in nodes}
    bodies: dict[str, frozenset[str]] = {}
    for node in nodes.values():
        if node.type != "loop":
            continue
        # The body: nodes reachable from the loop branch that also lead back to the loop.
        # Walks avoid the loop node itself, or everything after ``done`` would count too.
        entry = [e.target for e in outgoing[node.id] if e.source_handle == LOOP_HANDLE]
        forward = _reach(entry, succ, avoid=node.id)
        backward = _reach(pred[node.id], pred, avoid=node.id)
        body = frozenset(forward & backward)
        if entry and not body:
            problems.append(f"node {node.id!r}: its loop branch never leads back to it")
        bodies[node.id] = body

    # A node the start cannot reach would never run: refused, not kept as dead weight.
    if len(starts) == 1:
        unreachable = sorted(set(nodes) - _reach([starts[0]], succ))
        if unreachable:
            problems.append(f"nodes the start cannot reach: {unreachable}")

    back = {_key(e) for lp, body in bodies.items() for e in incoming[lp] if e.source in body}
    cycle = _find_cycle(nodes, outgoing, back)
    if cycle:
        problems.append("cycle not made by a loop node: " + " -> ".join(cycle))

    # Only on an otherwise sound graph: the join check walks a topological order, and
    # with a stray cycle some nodes would never enter it.
    if not problems:
        problems.extend(_exclusive_joins(nodes, incoming, outgoing, back, bodies))

    if problems:
        raise DefinitionError(f"DAG {definition.name!r}", problems)
    return Graph(
        definition=definition,
        nodes=nodes,
        configs=configs,
        start=starts[0],
        ends=frozenset(ends),
        incoming={n: tuple(es) for n, es in incoming.items()},
        outgoing={n: tuple(es) for n, es in outgoing.items()},
        bodies=bodies,
    )


def _exclusive_joins(
    nodes: Mapping[str, Node],
    incoming: Mapping[str, list[Edge]],
    outgoing: Mapping[str, list[Edge]],
    back: set[tuple[str, str, str | None]],
    bodies: Mapping[str, frozenset[str]],
) -> list[str]:
    """``all`` joins that can never fire: two incoming edges that only exclusive branches
    of one condition lead to (each run of the condition takes one branch).

    For every node, the branches every path from the start to it takes -- ``(condition,
    handle)`` pairs, intersected over its incoming edges -- in one pass in topological
    order over the graph without its loop back edges. A condition inside a loop body
    whose join is outside that loop is left alone: two iterations may take both branches.
    """
    forward = {n: [e for e in outgoing[n] if _key(e) not in back] for n in nodes}
    indegree = {n: 0 for n in nodes}
    for n in nodes:
        for e in forward[n]:
            indegree[e.target] += 1
    order = [n for n in nodes if indegree[n] == 0]
    for n in order:  # grows while it is walked: Kahn's algorithm
        for e in forward[n]:
            indegree[e.target] -= 1
            if indegree[e.target] == 0:
                order.append(e.target)

    def via(edge: Edge) -> frozenset[tuple[str, str | None]]:
        taken = required[edge.source]
        if nodes[edge.source].type == "condition":
            taken = taken | {(edge.source, edge.source_handle)}
        return taken

    required: dict[str, frozenset[tuple[str, str | None]]] = {}
    problems = []
    for n in order:
        entries = [e for e in incoming[n] if _key(e) not in back]
        paths = [via(e) for e in entries]
        required[n] = frozenset.intersection(*paths) if paths else frozenset()
        if nodes[n].join != "all" or len(entries) < 2:
            continue
        holders = {lp for lp, body in bodies.items() if n in body}
        seen: dict[str, tuple[str | None, str]] = {}
        clash = None
        for edge, taken in zip(entries, paths, strict=True):
            # Sorted: a frozenset's order changes with the hash seed, and the same
            # definition must name the same clash in every process.
            for cond, handle in sorted(taken, key=str):
                inner = [lp for lp, body in bodies.items() if cond in body]
                if any(lp not in holders for lp in inner):
                    continue  # the condition runs once per iteration of a loop around it
                first = seen.setdefault(cond, (handle, edge.source))
                if first[0] != handle and clash is None:
                    clash = (cond, first, (handle, edge.source))
        if clash is not None:
            cond, (h1, s1), (h2, s2) = clash
            problems.append(
                f"node {n!r}: an 'all' join that can never fire: its input from {s1!r} "
                f"comes only through branch {h1!r} of condition {cond!r} and its input "
                f"from {s2!r} only through branch {h2!r}, and the condition takes one "
                "branch (use join 'any' to continue on whichever branch ran)"
            )
    return problems


def _find_cycle(
    nodes: Mapping[str, Node],
    outgoing: Mapping[str, list[Edge]],
    back: set[tuple[str, str, str | None]],
) -> list[str]:
    """One cycle left once loop back edges are removed, as a path (empty if acyclic)."""
    # Depth-first with an explicit stack of (node, next edge) frames, not recursion: a
    # chain of 10,000 nodes (SWF_MAX_DAG_NODES) is far past Python's recursion limit.
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(nodes, white)
    parent: dict[str, str] = {}
    # Each node's forward edges, listed once: recomputing them on every visit of a
    # node made the search quadratic in its fan-out.
    forward = {n: [e for e in outgoing[n] if _key(e) not in back] for n in nodes}
    for root in nodes:
        if colour[root] != white:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        colour[root] = grey
        while stack:
            n, i = stack[-1]
            edges = forward[n]
            if i < len(edges):
                stack[-1] = (n, i + 1)
                t = edges[i].target
                # grey: t is on the current path, so this edge closes a cycle.
                if colour[t] == grey:
                    path = [t]
                    cur = n
                    while cur != t:
                        path.append(cur)
                        cur = parent[cur]
                    path.append(t)
                    return list(reversed(path))
                if colour[t] == white:
                    colour[t] = grey
                    parent[t] = n
                    stack.append((t, 0))
            else:
                colour[n] = black
                stack.pop()
    return []


def load(data: str | bytes | Mapping[str, Any] | DagDefinition) -> DagDefinition:
    """Parse and validate a definition from JSON text or a mapping.

    Raises:
        DefinitionError: every structural and graph problem found.
    """
    return load_graph(data)[0]


def load_graph(
    data: str | bytes | Mapping[str, Any] | DagDefinition,
) -> tuple[DagDefinition, Graph]:
    """:func:`load`, with the graph its checks built (a start needs both: checking twice
    was a third of a hundred-node DAG's start).

    Raises:
        DefinitionError: every structural and graph problem found.
    """
    # Sizes and fields first (parse), so the graph checks never walk an oversized or
    # malformed definition; a DagDefinition given as is is only measured.
    definition = parse(data)
    return definition, check(definition)


class DagBuilder:
    """Build a definition in Python.

    ::

        b = DagBuilder("orders")
        start = b.node("start", "start")
        fetch = b.node("fetch", "python", function="fetch_order", args={"id": "{{ctx.input.id}}"})
        end = b.node("end", "end", outputs={"order": "{{ctx.fetch}}"})
        b.chain(start, fetch, end)
        definition = b.build()
    """

    def __init__(self, name: str, *, type: str = DEFAULT_DAG_TYPE, description: str = "") -> None:
        self.name = name
        self.type = type
        self.description = description
        self._nodes: list[Node] = []
        self._edges: list[Edge] = []

    def node(
        self,
        id: str,
        type: str,
        *,
        join: JoinMode = "all",
        output_variable: str | None = None,
        error_handling: ErrorHandling = "fail_workflow",
        retry: NodeRetry | None = None,
        **config: Any,
    ) -> str:
        """Add a node; ``config`` holds its type's settings. Returns its id."""
        self._nodes.append(
            Node(
                id=id,
                type=type,
                config=config,
                join=join,
                output_variable=output_variable,
                error_handling=error_handling,
                retry=retry,
            )
        )
        return id

    def edge(self, source: str, target: str, *, handle: str | None = None) -> None:
        self._edges.append(Edge(source=source, target=target, source_handle=handle))

    def chain(self, *ids: str) -> None:
        """Default-handle edges ``ids[0] -> ids[1] -> ...``."""
        for a, b in itertools.pairwise(ids):
            self.edge(a, b)

    def build(self) -> DagDefinition:
        """The checked definition. Raises :class:`DefinitionError`."""
        definition = DagDefinition(
            name=self.name,
            nodes=list(self._nodes),
            edges=list(self._edges),
            type=self.type,
            description=self.description,
        )
        # The same two checks as load(): a definition built in code meets the limits and
        # the graph rules a JSON one does.
        check_size(definition)
        check(definition)
        return definition
