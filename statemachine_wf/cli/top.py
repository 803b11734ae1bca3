"""``statemachine-wf top``: a live terminal view of the store - instances by status,
throughput (started and finished per bucket, with a sparkline), queue depth by type and
the workers holding leases - redrawn every ``--interval`` seconds.

``--once`` prints one frame and exits (``--json``: the frame's data, for scripts);
``--iterations N`` stops after N frames. The reads are the dashboard's
(:class:`~statemachine_wf.dashboard.reads.Overview`, implemented by both shipped stores).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from rich.console import Group, RenderableType
from rich.live import Live
from rich.text import Text

from ..core.store import Store
from ..dashboard.reads import Overview, columns, overview
from ..definition.events import Status
from . import output
from .formatting import _when

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[int]) -> str:
    top = max(values, default=0)
    if top == 0:
        return BARS[0] * len(values)
    return "".join(BARS[min(len(BARS) - 1, v * (len(BARS) - 1) // top)] for v in values)


def frame(reads: Overview, *, now: float, window: float, bucket: float) -> dict[str, Any]:
    """What one frame shows, as plain data (``top --once --json`` prints it)."""
    since = now - window
    n = max(1, int(window // bucket))
    series = columns(reads.throughput(since=since, bucket=bucket), since=since, bucket=bucket, n=n)
    minutes = window / 60
    counts = reads.status_counts()
    statuses = {s.value: counts.get(s.value, 0) for s in Status}  # every status, in order
    return {
        "at": now,
        "window": window,
        "bucket": bucket,
        "statuses": statuses,
        "dead_letters": reads.dead_letter_counts(),
        "throughput": {
            **series,
            "started_per_minute": round(sum(series["started"]) / minutes, 2),
            "finished_per_minute": round(sum(series["finished"]) / minutes, 2),
        },
        "queue": reads.queue_depth(),
        "workers": reads.workers(),
    }


def render(data: dict[str, Any]) -> RenderableType:
    now = data["at"]
    statuses: dict[str, int] = data["statuses"]
    letters = data["dead_letters"]
    tp = data["throughput"]
    head = Text.assemble(
        ("statemachine_wf top", "bold"),
        f"  {_when(now)} UTC  ",
        f"instances {sum(statuses.values())}  ",
        f"dead letters {letters['waiting']} waiting / {letters['total']}",
    )
    status_table = output.table("instances by status", list(statuses), [list(statuses.values())])
    window_min = data["window"] / 60
    tp_table = output.table(
        f"throughput, last {window_min:g} min ({data['bucket']:g}s buckets)",
        ["", "per minute", "over time"],
        [
            ["started", tp["started_per_minute"], sparkline(tp["started"])],
            ["finished", tp["finished_per_minute"], sparkline(tp["finished"])],
        ],
    )
    queue_table = output.table(
        "queue depth",
        ["type", "kind", "ready", "leased", "later"],
        [[q["type"], q["kind"], q["ready"], q["leased"], q["later"]] for q in data["queue"]]
        or [["(empty)", "", 0, 0, 0]],
    )
    worker_table = output.table(
        "workers",
        ["worker", "leases", "lease left", "last heartbeat"],
        [
            [
                w["worker"],
                w["leases"],
                f"{w['lease_until'] - now:.1f}s",
                "-" if w["heartbeat_at"] is None else f"{now - w['heartbeat_at']:.1f}s ago",
            ]
            for w in data["workers"]
        ]
        or [["(no worker holds a lease)", "", "", ""]],
    )
    return Group(head, status_table, tp_table, queue_table, worker_table)


def add_parser(command: Callable[[str, str], argparse.ArgumentParser]) -> None:
    t = command("top", "a live view of throughput, queue depth and workers (Ctrl-C to leave)")
    t.add_argument("--interval", type=float, default=2.0, help="seconds between frames")
    t.add_argument("--once", action="store_true", help="print one frame and exit")
    t.add_argument("--iterations", type=int, help="stop after this many frames (default: never)")
    t.add_argument("--window", type=float, default=600.0, help="seconds of throughput shown")
    t.add_argument("--bucket", type=float, default=60.0, help="seconds per throughput bucket")
    t.add_argument("--json", action="store_true", help="with --once: the frame as JSON")


def top(store: Store, args: argparse.Namespace) -> None:
    if args.interval <= 0:
        raise ValueError(f"--interval must be > 0 seconds, got {args.interval}")
    if args.window <= 0 or args.bucket <= 0 or args.bucket > args.window:
        raise ValueError("--window and --bucket must be > 0, and --bucket <= --window")
    if args.iterations is not None and args.iterations < 1:
        raise ValueError(f"--iterations must be >= 1, got {args.iterations}")
    if args.json and not args.once:
        raise ValueError("--json needs --once (one frame as JSON)")
    reads = overview(store)
    if reads is None:
        raise ValueError(f"the store {type(store).__name__} offers no overview reads for top")

    def data() -> dict[str, Any]:
        return frame(reads, now=time.time(), window=args.window, bucket=args.bucket)

    if args.once:
        if args.json:
            output.print_json(data())
        else:
            output.console().print(render(data()))
        return
    frames = args.iterations
    try:
        if output.tty():
            _live(lambda: render(data()), args.interval, frames)
        else:  # piped: one frame after another
            con = output.console()
            shown = 0
            while frames is None or shown < frames:
                if shown:
                    time.sleep(args.interval)
                con.print(render(data()))
                con.print()
                shown += 1
    except KeyboardInterrupt:
        pass


def _live(draw: Callable[[], RenderableType], interval: float, frames: int | None) -> None:
    shown = 1
    with Live(draw(), console=output.console(), auto_refresh=False, screen=False) as live:
        while frames is None or shown < frames:
            time.sleep(interval)
            live.update(draw(), refresh=True)
            shown += 1
