"""The DAG interpreter: what a node's completion or failure means for its instance.

Pure functions over the instance's log (no I/O). Each returns a :class:`DagDecision`,
which a store applies in one commit gated by the instance's version: the events to
append (``NODE_DISPATCHED`` for every successor that became ready, a terminal event),
the node tasks to insert, delete or reschedule, and the instance's new status.

Readiness (the barrier): an edge has *fired* when its source completed with the edge's
handle. A node with join ``all`` is ready when every incoming edge fired, with ``any``
when one did; a node already dispatched is never dispatched again. Inside a loop body
both rules are per iteration: only completions and dispatches after the loop node's
latest ``loop`` completion count. A loop node is dispatched again (``via="back"``) when
every edge coming back from its body fired after its latest dispatch.

Completion (draining): the instance completes when an end node has completed *and* no
dispatched node is still open. An ``any`` join lets an end run while other branches are
still in flight; those branches run to their end (each reachable node exactly once),
and a late arrival at an ``any`` join that already fired is recorded (its
``NODE_COMPLETED``) but dispatches nothing again. The output is the first completed end
node's. A draining branch that fails with ``fail_workflow`` still fails the instance.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..definition.dag_definition import Edge
from ..definition.dag_models import Graph
from ..definition.events import Ev, EventRecord, NewEvent, Status
from .dag_view import Completion as Completion
from .dag_view import Dispatched as Dispatched
from .dag_view import LogView as LogView
from .dag_view import Timer as Timer
from .evolve import evolve
from .fold import Projection


@dataclass(frozen=True, slots=True)
class NodeTask:
    """A node task to enqueue: due ``delay`` seconds from the commit, ``attempt`` tries so far."""

    node: str
    delay: float = 0.0
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class TaskRetry:
    """Reschedule the node's task: due in ``delay`` s, lease released, ``failures`` kept."""

    node: str
    delay: float
    failures: int


@dataclass(frozen=True, slots=True)
class DagDecision:
    events: tuple[NewEvent, ...] = ()
    dispatch: tuple[NodeTask, ...] = ()
    done: str | None = None
    """The node whose task goes (its run is settled)."""
    retry: TaskRetry | None = None
    status: Status | None = None
    output: dict[str, Any] | None = None
    """Stored as the instance's ``progress`` when it completes: ``{"output": ...}``."""
    error: dict[str, Any] | None = None
    finish: bool = False
    """Every task of the instance goes (it is terminal)."""
    dead_letter: str | None = None
    """A reason: the store also writes a dead letter in the same commit (retries
    exhausted)."""
    also_done: tuple[str, ...] = ()
    """More nodes whose tasks go: a group of completions committed together."""


def _since(graph: Graph, view: LogView, edge: Edge) -> int:
    """Where an edge's firing starts to count: the current iteration of the innermost
    loop both its ends share. A firing from an earlier iteration of it is last round's
    and must not open this round's join; with no loop in common, the source ran outside
    the target's loop (before it, say), so its one firing counts for every iteration."""
    loop = graph.shared_loop(edge)
    return 0 if loop is None else view.scope_start(loop)


def ready(graph: Graph, view: LogView, node: str) -> str | None:
    """How ``node`` is to be dispatched now (``"entry"`` or ``"back"``), or None."""
    entry, back = graph.joins[node]
    dispatched = view.dispatches.get(node, [])
    if back and dispatched:
        # A loop's next round: only once this node's last run is settled and every back
        # edge fired *after* that run was dispatched (an older firing was that round's).
        last = dispatched[-1].seq
        if view.settled(node, dispatched[-1].run) and all(view.fired(e, last + 1) for e in back):
            return "back"
    # Entered once per scope: once per instance outside loops, once per iteration of
    # the innermost loop holding it. This is what makes a join fire once although every
    # incoming branch's completion asks again (and two racing runners both ask: the
    # second decides on a view that holds the first one's NODE_DISPATCHED, or loses the
    # CAS and re-reads until it does).
    start = view.scope_start(graph.scope[node])
    if view.entered.get(node, 0) > start:
        return None
    if not entry:
        return None
    # The barrier: an edge counts only if its source completed with the edge's handle
    # within the iteration both ends share (_since), so last round's results never open
    # this round's join. Lazily, and from the last edge back: `all` stops at the first
    # edge not fired, and branches finish about in the order they were dispatched (the
    # definition's), so the one likely still out is found at once. In the definition's
    # order each branch of a wide join looked at every branch before it: 103 us a branch
    # of a 100-wide join, now 5 (bench/README.md, "DAG: a wide join's barrier checked
    # from its last edge").
    fired = (view.fired(e, _since(graph, view, e)) for e in reversed(entry))
    ok = all(fired) if graph.nodes[node].join == "all" else any(fired)
    return "entry" if ok else None


# -- decisions ----------------------------------------------------------------------------


def start_events(graph: Graph, created: Mapping[str, Any]) -> list[NewEvent]:
    """The first events of an instance: its creation (with the definition) and the start."""
    return [
        NewEvent(Ev.CREATED, payload=dict(created)),
        NewEvent(Ev.NODE_DISPATCHED, graph.start, 1, {"via": "entry"}),
    ]


@dataclass(frozen=True, slots=True)
class NodeOutcome:
    """What one run of a node produced, as its ``NODE_COMPLETED`` records it."""

    output: Any
    handle: str | None = None
    delay: float = 0.0
    """A delay node's wait: its successors' tasks are due that much later."""
    error: bool = False
    """The run ended on its ``error`` handle (a failure routed on, not raised)."""


def node_finished(
    graph: Graph,
    view: LogView,
    node: str,
    run: int,
    outcome: NodeOutcome,
    *,
    attempt: int,
    status: Status,
    open_slots: Sequence[str],
) -> DagDecision | None:
    """The one decision for a node run that finished: its result and what follows.

    The ``NODE_COMPLETED`` (output, handle, the variable it sets, the try), then the
    dispatches, join firings, completion or dead end it leads to (:func:`completed`),
    in one commit: as :mod:`statemachine_wf.core.decide` is for a state-machine step.

    None when there is nothing to write: the instance is over, another runner already
    scheduled this run (its task is gone), or a duplicate delivery of the same run
    recorded its result first (then that delivery's runner schedules what follows).
    """
    if status.terminal or node not in open_slots:
        return None
    if view.completion(node, run) is not None:
        return None
    payload: dict[str, Any] = {
        "output": outcome.output,
        "handle": outcome.handle,
        "var": graph.nodes[node].variable,
        "try": attempt,
    }
    if outcome.delay:
        payload["delay"] = outcome.delay
    if outcome.error:
        payload["error"] = True
    event = NewEvent(Ev.NODE_COMPLETED, node, run, payload)
    decision = completed(
        graph, view.with_completion(event), node, run, status=status, open_slots=open_slots
    )
    if decision is None:  # cannot happen: not terminal, and the node's task is open
        raise RuntimeError(f"{node} run {run} completed, and no decision followed")
    return evolve(decision, events=(event, *decision.events))


def open_after(open_slots: Iterable[str], decision: DagDecision) -> tuple[str, ...]:
    """The nodes with a task once ``decision`` is committed on ``open_slots``: the settled
    node's task goes (every task when the instance finishes), the dispatched ones come;
    a retried or taken task stays. (Only a version-bumping commit adds or deletes a node
    task, so a commit's own CAS vouches for ``open_slots`` being the whole set.)"""
    if decision.finish:
        return ()
    gone = {decision.done, *decision.also_done}
    kept = [s for s in open_slots if s not in gone]
    return tuple(dict.fromkeys([*kept, *(t.node for t in decision.dispatch)]))


def handed_task(decision: DagDecision) -> NodeTask | None:
    """The node task ``decision`` may hand to the worker that commits it (see
    :func:`hand_off`): its one dispatch, due now, in a commit that neither ends the
    instance nor retries a node; None otherwise."""
    if settles(decision) or len(decision.dispatch) != 1 or decision.dispatch[0].delay > 0:
        return None
    return decision.dispatch[0]


def settles(decision: DagDecision) -> bool:
    """Whether ``decision`` ends the instance, sets its status or retries a node: a
    commit that takes no node task for its worker."""
    return decision.finish or decision.status is not None or decision.retry is not None


def takes_sibling(decision: DagDecision) -> bool:
    """Whether the worker committing ``decision`` may take another node task of the
    instance that is due now, in that commit (``dag_commit(take="sibling")``): when the decision
    neither ends the instance, sets its status nor retries a node, and hands nothing over
    (:func:`hand_off`). A fan-out's branch, say, whose commit dispatches nothing yet: its
    worker runs the next branch without a claim."""
    return not settles(decision) and handed_task(decision) is None


def hand_off(decision: DagDecision) -> DagDecision | None:
    """``decision`` handing its next node straight to the worker that commits it, or None
    when it cannot: only a commit whose one dispatch is due now, that neither ends the
    instance nor retries a node. The decision then ends with that node's NODE_STARTED (a
    claim's intent: the next try), after the dispatch; the store leases its task to the
    committing worker in the same commit (``dag_commit(take="handed")``), so it needs no claim."""
    task = handed_task(decision)
    if task is None:
        return None
    # What dag_claim would write for the task: its try is the attempt dag_tail gives the
    # leased row (attempt + 1), and a task just inserted has no failures yet.
    started = NewEvent(Ev.NODE_STARTED, task.node, task.attempt + 1, {"failures": 0})
    return evolve(decision, events=(*decision.events, started))


def completed(
    graph: Graph,
    view: LogView,
    node: str,
    run: int,
    *,
    status: Status,
    open_slots: Sequence[str],
) -> DagDecision | None:
    """``node``'s run ``run`` has its NODE_COMPLETED in ``view``: schedule what follows.

    None when there is nothing to write (the instance is over, or this run was already
    scheduled by someone else).
    """
    if status.terminal:
        return DagDecision(done=node) if node in open_slots else None
    if node not in open_slots:
        return None  # another runner scheduled this run already (its task is gone)
    comp = view.completion(node, run)
    if comp is None:
        raise RuntimeError(f"{node} run {run} has no NODE_COMPLETED")
    events: list[NewEvent] = []
    tasks: list[NodeTask] = []
    # Each target once: ready() reads the view, which does not hold this decision's own
    # NODE_DISPATCHED, so a target reached by two edges would be dispatched twice.
    for target in dict.fromkeys(graph.targets(node, comp.handle)):
        via = ready(graph, view, target)
        if via is None:
            continue
        events.append(
            NewEvent(Ev.NODE_DISPATCHED, target, view.run(target) + 1, {"via": via, "from": node})
        )
        # The task starts from the node's tries over all its runs, not from 0: its next
        # NODE_STARTED is then a try number the log's unique index has not seen (a loop
        # body's second run would otherwise repeat the first run's try 1).
        tasks.append(NodeTask(target, comp.delay, view.tries.get(target, 0)))
    remaining = (set(open_slots) - {node}) | {t.node for t in tasks}
    if remaining:
        # Still draining: an end node that completed early (through an ``any`` join)
        # waits for every dispatched branch before the instance completes.
        return DagDecision(events=tuple(events), dispatch=tuple(tasks), done=node)
    end = first_end(graph, view)
    if end is not None:
        end_node, output = end
        return DagDecision(
            events=(
                *events,
                NewEvent(Ev.COMPLETED, payload={"node": end_node, "output": output}),
            ),
            done=node,
            status=Status.COMPLETED,
            output={"output": output},
            finish=True,
        )
    error = {
        "node": node,
        "code": "dead_end",
        "message": (
            f"nothing left to run after {node!r} (handle {comp.handle!r}) and no end "
            "node was reached: a branch without successors, or a join that cannot fire"
        ),
        "recoverable": False,
    }
    return DagDecision(
        events=(NewEvent(Ev.FAILED, error=error),),
        done=node,
        status=Status.FAILED,
        error=error,
        finish=True,
    )


def first_end(graph: Graph, view: LogView) -> tuple[str, dict[str, Any]] | None:
    """The end node that completed first and its output: the workflow's output."""
    done = [(c.seq, n, c.output) for n in graph.ends for c in view.completions.get(n, ())]
    if not done:
        return None
    _, node, output = min(done, key=lambda d: d[0])
    return node, output if isinstance(output, dict) else {"value": output}


def failed(
    graph: Graph,
    node: str,
    run: int,
    error: dict[str, Any],
    *,
    failures: int,
    retryable: bool,
    status: Status,
) -> DagDecision | None:
    """``node``'s run failed (``failures`` consecutive failures before this one).

    Retry with backoff while the node's policy allows; then, for ``fail_workflow``, the
    instance FAILS. (``continue`` nodes complete on their ``error`` handle instead: the
    caller writes that completion when :func:`gives_up` says so.)
    """
    if status.terminal:
        return DagDecision(done=node)
    policy = graph.nodes[node].retry_policy()
    failures += 1
    if retryable and not policy.exhausted(failures):
        delay = policy.delay(failures)
        return DagDecision(
            events=(
                NewEvent(
                    Ev.NODE_RETRYING,
                    node,
                    None,
                    {"run": run, "failures": failures, "retry_in": round(delay, 3)},
                    error,
                ),
            ),
            retry=TaskRetry(node, delay, failures),
        )
    message = error.get("message", "")
    dead_letter = None
    # A dead letter only when retries ran out: a failure that was never retried (a Fail,
    # bad config) is an outcome, not poison, as a state machine's Fail is. So is a Fail
    # that follows retryable failures: the node said what it is, retries did not run out.
    if retryable and failures > 1:
        message = f"retries exhausted after {failures} failures: {message}"
        dead_letter = f"node {node!r}: {message}"
    info = {**error, "message": message, "recoverable": False}
    events = [NewEvent(Ev.NODE_FAILED, node, run, {"outcome": "fail", "failures": failures}, info)]
    if dead_letter is not None:
        events.append(NewEvent(Ev.DEAD_LETTERED, payload={"reason": dead_letter}))
    return DagDecision(
        events=tuple(events),
        done=node,
        status=Status.FAILED,
        error=info,
        finish=True,
        dead_letter=dead_letter,
    )


def gives_up(graph: Graph, node: str, *, failures: int, retryable: bool) -> bool:
    """Whether this failure (after ``failures`` earlier ones) is the node's last try."""
    return not retryable or graph.nodes[node].retry_policy().exhausted(failures + 1)


def cancel(open_slots: Sequence[str]) -> DagDecision:
    """Cancel the instance: CANCELLED, and every node task goes in the same commit."""
    return DagDecision(
        events=(NewEvent(Ev.CANCELLED, payload={"open": sorted(open_slots)}),),
        status=Status.CANCELLED,
        finish=True,
    )


def project(events: Iterable[EventRecord]) -> Projection:
    """A DAG instance's row as its log says it should be (``verify``, ``rebuild``).

    RUNNING from its creation; the terminal events set the status, the output
    (``progress = {"output": ...}``) and the error; a quarantine stalls it.
    """
    state = Projection(status=Status.RUNNING)
    for e in sorted(events, key=lambda e: e.seq):
        if e.event_type == Ev.COMPLETED:
            output = e.payload.get("output")
            state = replace(state, status=Status.COMPLETED, progress={"output": output})
        elif e.event_type in (Ev.FAILED, Ev.NODE_FAILED):
            state = replace(state, status=Status.FAILED, error=e.error)
        elif e.event_type == Ev.CANCELLED:
            state = replace(state, status=Status.CANCELLED)
        elif e.event_type == Ev.QUARANTINED:
            state = replace(state, status=Status.STALLED, error=e.error)
    return state
