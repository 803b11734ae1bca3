"""An instance's log as the DAG interpreter reads it (``LogView``): each question a
decision asks answered from what was folded in, at a cost that does not grow with the log
(docs/architecture.md, "A decision's cost does not grow with the log")."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, TypeVar

from ..definition.dag_definition import LOOP_HANDLE, DagDefinition, Edge
from ..definition.dag_models import Graph, check
from ..definition.events import Ev, EventRecord, NewEvent
from .evolve import evolve


@dataclass(frozen=True, slots=True)
class Completion:
    seq: int
    run: int
    handle: str | None
    output: Any
    error: bool
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class Timer:
    """A node run waiting for its time: ``seconds`` long, over at ``until`` (epoch s);
    ``output`` is the run's result once it is."""

    seconds: float
    until: float
    output: Any = None


@dataclass(frozen=True, slots=True)
class Dispatched:
    seq: int
    run: int
    via: str


_Run = TypeVar("_Run", Completion, Dispatched)


@dataclass
class LogView:
    """An instance's log, indexed for the interpreter."""

    input: dict[str, Any]
    definition: dict[str, Any]
    completions: dict[str, list[Completion]] = field(default_factory=dict)
    dispatches: dict[str, list[Dispatched]] = field(default_factory=dict)
    failed: set[tuple[str, int]] = field(default_factory=set)
    tries: dict[str, int] = field(default_factory=dict)
    timers: dict[tuple[str, int], Timer] = field(default_factory=dict)
    """(node, run) -> the timer its run is waiting on (a delay node's ``NODE_WAITING``)."""
    # What the interpreter asks of every decision, kept as the log is folded in, so that
    # its cost does not grow with the log: a loop's 3,000th iteration scanned the loop's
    # 2,999 completions and dispatches several times, and rebuilt the context from every
    # completion (bench/README.md, "Session 64"). One entry a node (or variable, or
    # node and handle), however many runs it has.
    values: dict[str, Any] = field(default_factory=dict)
    """Variable -> the output of the latest completion setting it (``context``)."""
    fired_at: dict[tuple[str, str | None], int] = field(default_factory=dict)
    """(node, handle) -> the seq of the latest completion of the node with that handle."""
    loop_starts: dict[str, int] = field(default_factory=dict)
    """Loop node -> the seq of its latest ``loop`` completion (``scope_start``)."""
    entered: dict[str, int] = field(default_factory=dict)
    """Node -> the seq of its latest dispatch ``via="entry"``."""

    last_seq: int = 0
    """The highest seq read from the log: :meth:`extend` takes only events after it."""
    top_seq: int = field(default=0, compare=False)
    """The highest seq folded in, read or committed (:meth:`committed`)."""
    own: set[int] = field(default_factory=set, compare=False)
    """Seqs above :attr:`last_seq` folded in by :meth:`committed`: a later read skips them."""

    @classmethod
    def of(cls, events: Iterable[EventRecord]) -> LogView:
        ordered = sorted(events, key=lambda e: e.seq)
        if not ordered or ordered[0].event_type != Ev.CREATED or "dag" not in ordered[0].payload:
            raise ValueError("not a DAG instance's log (no WORKFLOW_CREATED with a definition)")
        head = ordered[0].payload
        view = cls(input=dict(head.get("input") or {}), definition=dict(head["dag"]))
        view.last_seq = view.top_seq = ordered[0].seq
        view.extend(ordered[1:])
        return view

    def extend(self, events: Iterable[EventRecord]) -> None:
        """Fold in the events after :attr:`last_seq` (a tail read), in seq order.

        Seqs at or below ``last_seq`` are skipped, so an overlapping read is harmless. An
        instance's events commit in seq order (each takes its seq under the instance's
        row lock), so the events after ``last_seq`` are all that is missing.
        """
        for e in sorted(events, key=lambda e: e.seq):
            if e.seq <= self.last_seq:
                continue
            self.last_seq = e.seq
            if e.seq in self.own:
                continue  # this runner's own commit, folded in when it committed
            self._add(e, e.seq)
        self.top_seq = max(self.top_seq, self.last_seq)
        if self.own:
            self.own = {s for s in self.own if s > self.last_seq}

    def committed(self, events: Sequence[NewEvent], seqs: Sequence[int]) -> None:
        """Fold in the events of a decision this runner has just committed, at the seqs
        the commit gave them (``DagApplied.seqs``), without reading them back.

        Sound only for a commit made on this view's version (its CAS held): then every
        event that changed the version is already folded in, and whatever commits next
        comes after these. What the commit may have passed over are the claims'
        ``NODE_STARTED`` (a claim does not bump the version): the next read folds those in
        (they only count tries, in any order) and skips these, which it reads again.
        """
        for e, seq in zip(events, seqs, strict=True):
            self.own.add(seq)
            self.top_seq = max(self.top_seq, seq)
            self._add(e, seq)

    def started(self, node: str, attempt: int) -> None:
        """Count a try of ``node`` this runner took (a claim's or sibling's
        ``NODE_STARTED``) before a read shows it."""
        self.tries[node] = max(self.tries.get(node, 0), attempt)

    def with_completion(self, event: NewEvent) -> LogView:
        """A copy with the ``NODE_COMPLETED`` ``event`` folded in; this view is unchanged.

        For a decision committed together with ``event`` (a node's result and what
        follows it are one commit), so the event is folded at the seq the commit will
        give it. Only what a completion touches is copied.
        """
        if event.event_type != Ev.NODE_COMPLETED or event.node is None:
            raise ValueError(f"with_completion takes a NODE_COMPLETED of a node, not {event!r}")
        copy = evolve(
            self,
            completions={
                **self.completions,
                event.node: list(self.completions.get(event.node, ())),
            },
            values=dict(self.values),
            fired_at=dict(self.fired_at),
            loop_starts=dict(self.loop_starts),
        )
        # The commit's real seq is not known yet, but only the order of seqs matters to the
        # barrier (fired, scope_start), and any seq above the view's orders the event after
        # everything folded so far, as the commit will. The copy is for this decision only:
        # cached, its made-up seq would make extend() skip the real events at or below it.
        copy.last_seq = copy.top_seq = self.top_seq + 1
        copy._add(event, copy.top_seq)
        return copy

    def _add(self, e: EventRecord | NewEvent, seq: int) -> None:
        node = e.node
        if node is None:
            return
        if e.event_type == Ev.NODE_COMPLETED:
            p = e.payload
            handle = p.get("handle")
            self.completions.setdefault(node, []).append(
                Completion(
                    seq,
                    e.attempt or 0,
                    handle,
                    p.get("output"),
                    bool(p.get("error", False)),
                    float(p.get("delay") or 0.0),
                )
            )
            self.values[str(p.get("var") or node)] = p.get("output")
            if seq > self.fired_at.get((node, handle), 0):
                self.fired_at[(node, handle)] = seq
            if handle == LOOP_HANDLE and seq > self.loop_starts.get(node, 0):
                self.loop_starts[node] = seq
        elif e.event_type == Ev.NODE_DISPATCHED:
            via = str(e.payload.get("via", "entry"))
            self.dispatches.setdefault(node, []).append(Dispatched(seq, e.attempt or 0, via))
            if via == "entry" and seq > self.entered.get(node, 0):
                self.entered[node] = seq
        # Only a delay node's NODE_WAITING carries "until"; a parked sub_workflow node's
        # names its child instead and is no timer.
        elif e.event_type == Ev.NODE_WAITING and "until" in e.payload:
            p = e.payload
            self.timers[(node, int(p.get("run") or 0))] = Timer(
                float(p.get("timer") or 0.0), float(p["until"]), p.get("output")
            )
        elif e.event_type == Ev.NODE_FAILED:
            self.failed.add((node, e.attempt or 0))
        elif e.event_type == Ev.NODE_STARTED:
            self.tries[node] = max(self.tries.get(node, 0), e.attempt or 0)

    def graph(self) -> Graph:
        return check(DagDefinition.model_validate(self.definition))

    def context(self) -> dict[str, Any]:
        """The fold of the log: the input, then every completed node's output, later wins."""
        return {"input": self.input, **self.values}

    def run(self, node: str) -> int:
        """The node's current (latest) run; 0 if it was never dispatched."""
        ds = self.dispatches.get(node)
        return ds[-1].run if ds else 0

    def dispatch(self, node: str, run: int) -> Dispatched | None:
        return _of_run(self.dispatches.get(node, ()), run)

    def completion(self, node: str, run: int) -> Completion | None:
        return _of_run(self.completions.get(node, ()), run)

    def settled(self, node: str, run: int) -> bool:
        return self.completion(node, run) is not None or (node, run) in self.failed

    def executions(self, node: str) -> int:
        return len(self.completions.get(node, ()))

    # -- the barrier --------------------------------------------------------------------
    def scope_start(self, loop: str | None) -> int:
        """Seq of the loop's latest ``loop`` completion: its current iteration's start."""
        if loop is None:
            return 0
        return self.loop_starts.get(loop, 0)

    def fired(self, edge: Edge, since: int) -> bool:
        return self.fired_at.get((edge.source, edge.source_handle), -1) >= since


def _of_run(records: Sequence[_Run], run: int) -> _Run | None:
    """The first of a node's ``records`` (its completions or dispatches, in seq order) of
    run ``run``, or None. A node's runs are numbered 1, 2, ... in the order they are
    dispatched, each settled before the next is (``ready``), so the records are in run
    order: run ``r`` is at ``r - 1`` unless a run left no record (a failed one), a run
    above the last record's has none, and anything else is a binary search away."""
    i = run - 1
    if 0 <= i < len(records) and records[i].run == run and (i == 0 or records[i - 1].run < run):
        return records[i]
    if not records or records[-1].run < run:
        return None  # not completed (dispatched) yet: the question asked most
    i = bisect_left(records, run, key=_run_of)
    return records[i] if i < len(records) and records[i].run == run else None


_run_of = attrgetter("run")
