"""The dashboard's pictures as SVG text, drawn here (no JavaScript library, no CDN).

* :func:`state_graph`: a state machine's steps and transitions, from its
  :class:`~statemachine_wf.WorkflowSpec` when the type is importable, else from the steps
  its events visited; the current step is highlighted.
* :func:`dag_graph`: a DAG instance's nodes and edges (from the definition stored in its
  WORKFLOW_CREATED event), each node coloured by its status (:func:`node_statuses`);
  every node is a ``<g data-node=ID>`` the page's script recolours from the live stream.
* :func:`throughput_chart`: instances started and finished per time bucket.

Every text that comes from data is escaped; layouts are layered left to right by the
breadth-first distance from the entry, so cycles (loops, retries) are drawn too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from statemachine_wf import COMPLETED, EventRecord, WorkflowSpec

from .reads import columns

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 150, 36, 60, 22, 16

NODE_STATUS_BY_EVENT = {
    "NODE_DISPATCHED": "queued",
    "NODE_STARTED": "running",
    "NODE_RETRYING": "retrying",
    "NODE_WAITING": "waiting",
    "NODE_COMPLETED": "completed",
    "NODE_FAILED": "failed",
}
"""The status a DAG node shows after each node event (the latest event wins)."""


def node_statuses(events: Iterable[EventRecord]) -> dict[str, str]:
    """Each DAG node's status after these events (nodes without events are absent)."""
    out: dict[str, str] = {}
    for e in events:
        status = NODE_STATUS_BY_EVENT.get(e.event_type)
        if e.node is not None and status is not None:
            if status == "completed" and e.payload.get("error"):
                status = "errored"  # a ``continue`` node that took its error handle
            out[e.node] = status
    return out


def _layers(
    nodes: Sequence[str], edges: Sequence[tuple[str, str]], entry: str | None
) -> list[list[str]]:
    """Nodes in columns by breadth-first distance from the entry (or the nodes nothing
    points at); nodes not reached go in a last column."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    incoming: set[str] = set()
    for a, b in edges:
        if a in succ and b in succ:
            succ[a].append(b)
            incoming.add(b)
    # Without a known entry (a log with no step yet, a definition without a start node),
    # start from the nodes nothing points at; a graph that is all cycle, from its first.
    roots = [entry] if entry in succ else [n for n in nodes if n not in incoming] or list(nodes[:1])
    depth = {r: 0 for r in roots}
    frontier = list(roots)
    while frontier:
        nxt = []
        for n in frontier:
            for m in succ[n]:
                if m not in depth:
                    depth[m] = depth[n] + 1
                    nxt.append(m)
        frontier = nxt
    last = max(depth.values(), default=-1) + 1
    columns: list[list[str]] = [[] for _ in range(last + 1)]
    for n in nodes:
        columns[depth.get(n, last)].append(n)
    return [c for c in columns if c]


def _draw(
    nodes: Sequence[str],
    edges: Sequence[tuple[str, str, str | None]],
    entry: str | None,
    classes: Mapping[str, str],
    labels: Mapping[str, str],
    *,
    title: str,
) -> str:
    # The SVG goes into the page as Markup (not escaped again by the template), so every
    # string from data is escaped here: node ids, labels and handles are written by a DAG
    # author, state names by the log.
    columns = _layers(nodes, [(a, b) for a, b, _ in edges], entry)
    pos: dict[str, tuple[int, int]] = {}
    for ci, column in enumerate(columns):
        for ri, n in enumerate(column):
            pos[n] = (PAD + ci * (BOX_W + GAP_X), PAD + ri * (BOX_H + GAP_Y))
    width = PAD * 2 + max(1, len(columns)) * (BOX_W + GAP_X) - GAP_X
    height = PAD * 2 + max((len(c) for c in columns), default=1) * (BOX_H + GAP_Y) - GAP_Y
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" role="img" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}">',
        f"<title>{escape(title)}</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z"/></marker></defs>',
    ]
    for a, b, handle in edges:
        # A stored definition was checked when it started, but the drawing does not rely
        # on it: an edge to an unknown node is skipped rather than raising.
        if a not in pos or b not in pos:
            continue
        (ax, ay), (bx, by) = pos[a], pos[b]
        x1, y1 = ax + BOX_W, ay + BOX_H // 2
        x2, y2 = bx, by + BOX_H // 2
        if bx <= ax:  # a back edge (a loop, a retry): around underneath
            low = max(ay, by) + BOX_H + GAP_Y // 2
            x1, y1, x2, y2 = ax + BOX_W // 2, ay + BOX_H, bx + BOX_W // 2, by + BOX_H
            path = f"M{x1},{y1} C{x1},{low} {x2},{low} {x2},{y2}"
        else:
            mid = (x1 + x2) // 2
            path = f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}"
        out.append(f'<path class="edge" d="{path}" marker-end="url(#arrow)"/>')
        if handle:
            out.append(
                f'<text class="handle" x="{(x1 + x2) // 2}" y="{(y1 + y2) // 2 - 4}">'
                f"{escape(handle)}</text>"
            )
    for n in nodes:
        x, y = pos[n]
        cls = escape(classes.get(n, "idle"), quote=True)
        label = labels.get(n, n)
        short = label if len(label) <= 20 else label[:19] + "…"
        out.append(
            f'<g class="node {cls}" data-node="{escape(n, quote=True)}">'
            f"<title>{escape(label)}: {cls}</title>"
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="7"/>'
            f'<text x="{x + BOX_W // 2}" y="{y + BOX_H // 2 + 5}">{escape(short)}</text></g>'
        )
    out.append("</svg>")
    return "".join(out)


def state_graph(
    spec: WorkflowSpec | None, events: Sequence[EventRecord], current: str | None, *, done: bool
) -> str:
    """The state graph, the current step highlighted (``done``: the end state is)."""
    end = "(end)"
    if spec is not None:
        steps = list(spec.steps)
        edges = [
            (s, end if t == COMPLETED else t, None)
            for s in steps
            for t in sorted(spec.steps[s].targets)
        ]
        entry: str | None = spec.initial
    else:  # not importable here: the steps the log visited, in the order visited
        steps, edges, entry = [], [], None
        previous = None
        for e in events:
            if e.event_type == "STEP_STARTED" and e.node:
                if e.node not in steps:
                    steps.append(e.node)
                if (
                    previous is not None
                    and previous != e.node
                    and (previous, e.node, None) not in edges
                ):
                    edges.append((previous, e.node, None))
                previous = e.node
        entry = steps[0] if steps else None
        if previous is not None and done:
            edges.append((previous, end, None))
    nodes = [*steps, end] if any(b == end for _, b, _ in edges) else steps
    visited = {e.node for e in events if e.event_type == "STEP_COMPLETED" and e.node}
    classes = {s: "completed" for s in visited}
    if done and end in nodes:
        classes[end] = "current"
    elif current is not None:
        classes[current] = "current"
    return _draw(nodes, edges, entry, classes, {}, title="state graph")


def dag_graph(definition: Mapping[str, Any], statuses: Mapping[str, str]) -> str:
    """The DAG's nodes and edges, each node classed by its status."""
    nodes = [str(n["id"]) for n in definition.get("nodes", ())]
    labels = {
        str(n["id"]): f"{n['id']} ({n.get('type', '?')})" for n in definition.get("nodes", ())
    }
    edges = [
        (str(e["source"]), str(e["target"]), e.get("source_handle") or e.get("sourceHandle"))
        for e in definition.get("edges", ())
    ]
    entry = next(
        (str(n["id"]) for n in definition.get("nodes", ()) if n.get("type") == "start"), None
    )
    return _draw(nodes, edges, entry, statuses, labels, title="DAG")


def throughput_chart(
    rows: Sequence[tuple[float, str, int]], *, since: float, now: float, bucket: float
) -> str:
    """Started and finished instances per bucket, as two polylines over a time axis."""
    width, height, left, bottom = 640, 200, 40, 24
    n = max(1, int((now - since) // bucket) + 1)
    series = columns(rows, since=since, bucket=bucket, n=n)
    top = max(1, *series["started"], *series["finished"])
    step = (width - left - 8) / max(1, n - 1)

    def points(values: list[int]) -> str:
        return " ".join(
            f"{left + i * step:.1f},{height - bottom - v * (height - bottom - 10) / top:.1f}"
            for i, v in enumerate(values)
        )

    minutes, base = (now - since) / 60, height - bottom
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" viewBox="0 0 {width} '
        f'{height}" width="{width}" height="{height}"><title>throughput</title>'
        f'<line class="axis" x1="{left}" y1="{base}" x2="{width - 8}" y2="{base}"/>'
        f'<line class="axis" x1="{left}" y1="10" x2="{left}" y2="{base}"/>'
        f'<text class="tick" x="4" y="16">{top}</text><text class="tick" x="4" y="{base}">0</text>'
        f'<text class="tick" x="{left}" y="{height - 6}">-{minutes:.0f} min</text>'
        f'<text class="tick" x="{width - 40}" y="{height - 6}">now</text>'
        f'<polyline class="started" points="{points(series["started"])}"/>'
        f'<polyline class="finished" points="{points(series["finished"])}"/>'
        f'<text class="started" x="{left + 10}" y="24">started: {sum(series["started"])}</text>'
        f'<text class="finished" x="{left + 130}" y="24">finished: {sum(series["finished"])}</text>'
        "</svg>"
    )
