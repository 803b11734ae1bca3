"""Running DAG node tasks: the I/O around the pure interpreter.

A runner that hosts DAGs hands each claimed node task (kind 'dag', slot = node id) to
:meth:`DagExecutor.run`. The claim already appended ``NODE_STARTED`` (the node's next
try). Then:

1. the context is folded from the log and the node's handler runs, outside any
   transaction;
2. its result is appended as ``NODE_COMPLETED`` for the node's run -- idempotent under
   the log's unique index, so a duplicate delivery writes nothing and stops here;
3. a CAS loop on the instance version: read the log, compute the successors that became
   ready and are not dispatched yet, and in one commit append their ``NODE_DISPATCHED``,
   insert their tasks, delete this node's task and bump the version (or complete the
   instance when an end node finished). A loser re-reads and sees the winner's dispatch.

A node task whose run is already completed (its runner died between steps 2 and 3) is
only scheduled; a failure retries with backoff (the task is due again later) and then,
per node, follows the ``error`` handle or fails the instance.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from ..errors import ConcurrencyConflict, Fail, InputError, LeaseLost, StepFailure
from ..events import Ev, NewEvent
from ..store import Claim, DagCommit, DagSnapshot, Store
from . import interpret
from .handlers import LoopState, NodeCall, NodeResult, Registry, handler_for
from .interpret import DagDecision, LogView
from .models import ERROR_HANDLE, Graph
from .templates import TemplateError

log = logging.getLogger("statemachine_wf.dag")

_NOT_RETRYABLE = (Fail, TemplateError, InputError, ValidationError, TypeError)
"""Errors that another try cannot fix: bad config, a missing template path, bad args."""


class DagExecutor:
    """Runs claimed DAG node tasks for one runner.

    Args:
        store: the runner's store.
        registry: the functions and queries ``python``/``data_query`` nodes may call.
        worker: the runner's worker id (written on events, owner of leases).
        loop: returns the calling thread's asyncio loop (handlers are coroutines).
    """

    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        worker: str,
        loop: Callable[[], asyncio.AbstractEventLoop],
        threads: int = 8,
    ) -> None:
        self.store = store
        self.registry = registry
        self.worker = worker
        self._loop = loop
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, threads), thread_name_prefix="swf-dag-fn"
        )
        self._graphs: OrderedDict[str, Graph] = OrderedDict()
        self._graphs_lock = threading.Lock()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- one node task ---------------------------------------------------------------------
    def run(self, claim: Claim) -> None:
        instance_id, node = claim.instance.id, claim.task.slot
        snap = self.store.dag_snapshot(instance_id)
        if snap is None:
            return  # deleted (a stopped test run): its tasks went with it
        view = LogView.of(snap.events)
        graph = self._graph(instance_id, view)
        run = view.run(node)
        if snap.instance.status.terminal:
            self._commit_loop(
                instance_id,
                lambda s, v: interpret.completed(
                    graph, v, node, run, status=s.instance.status, open_slots=s.open_slots
                ),
            )
            return
        if view.completion(node, run) is not None:
            # Completed by a runner that died before scheduling: schedule only.
            log.info("instance %s: %s run %d already completed; scheduling", instance_id, node, run)
            self.schedule(instance_id, graph, node, run)
            return
        call = NodeCall(
            instance_id=instance_id,
            node=graph.nodes[node],
            config=graph.config(node),
            ctx=view.context(),
            run=run,
            attempt=claim.task.attempt,
            registry=self.registry,
            pool=self._pool,
            loop=_loop_state(graph, view, node, run),
        )
        try:
            result = self._loop().run_until_complete(handler_for(call.node.type)(call))
            output = to_jsonable_python(result.output)
        except LeaseLost:
            raise
        except (Exception, PydanticSerializationError) as exc:
            self._failed(graph, claim, run, exc)
            return
        self.complete(
            instance_id,
            graph,
            node,
            run,
            NodeResult(output, result.handle, result.delay),
            attempt=claim.task.attempt,
        )

    def complete(
        self,
        instance_id: str,
        graph: Graph,
        node: str,
        run: int,
        result: NodeResult,
        *,
        attempt: int,
        error: bool = False,
    ) -> bool:
        """Record ``node``'s run ``run`` as completed with ``result``, then schedule.

        Returns False (and writes nothing else) when the result was already recorded: a
        duplicate delivery, or the instance has ended.
        """
        payload: dict[str, Any] = {
            "output": result.output,
            "handle": result.handle,
            "var": graph.nodes[node].variable,
            "try": attempt,
        }
        if result.delay:
            payload["delay"] = result.delay
        if error:
            payload["error"] = True
        event = NewEvent(Ev.NODE_COMPLETED, node, run, payload)
        if not self.store.dag_record(instance_id, event, worker=self.worker):
            log.info("instance %s: %s run %d result already recorded", instance_id, node, run)
            return False
        self.schedule(instance_id, graph, node, run)
        return True

    def schedule(self, instance_id: str, graph: Graph, node: str, run: int) -> None:
        """The CAS loop after ``node``'s run completed: dispatch what became ready."""
        self._commit_loop(
            instance_id,
            lambda s, v: interpret.completed(
                graph, v, node, run, status=s.instance.status, open_slots=s.open_slots
            ),
        )

    def _failed(self, graph: Graph, claim: Claim, run: int, exc: BaseException) -> None:
        instance_id, node = claim.instance.id, claim.task.slot
        retryable = not isinstance(exc, _NOT_RETRYABLE)
        info = _error_info(node, exc)
        failures = claim.task.failures
        log.info(
            "instance %s: node %s (run %d, try %d) raised %r",
            instance_id,
            node,
            run,
            claim.task.attempt,
            exc,
        )
        spec = graph.nodes[node]
        if spec.error_handling == "continue" and interpret.gives_up(
            graph, node, failures=failures, retryable=retryable
        ):
            self.complete(
                instance_id,
                graph,
                node,
                run,
                NodeResult({"error": info}, ERROR_HANDLE),
                attempt=claim.task.attempt,
                error=True,
            )
            return

        def decide(snap: DagSnapshot, view: LogView) -> DagDecision | None:
            if view.settled(node, run) or node not in snap.open_slots:
                return None
            return interpret.failed(
                graph,
                node,
                run,
                info,
                failures=failures,
                retryable=retryable,
                status=snap.instance.status,
            )

        self._commit_loop(instance_id, decide)

    def _commit_loop(
        self,
        instance_id: str,
        make: Callable[[DagSnapshot, LogView], DagDecision | None],
    ) -> None:
        for _ in range(200):
            snap = self.store.dag_snapshot(instance_id)
            if snap is None:
                return
            decision = make(snap, LogView.of(snap.events))
            if decision is None:
                return
            try:
                self.store.dag_apply(
                    DagCommit(instance_id, snap.instance.version, decision, self.worker)
                )
                return
            except ConcurrencyConflict:
                continue  # somebody decided first: re-read and see what they did
        raise LeaseLost(f"instance {instance_id} keeps changing under this runner")

    def _graph(self, instance_id: str, view: LogView) -> Graph:
        # A definition is immutable for its instance: check it once per process.
        with self._graphs_lock:
            graph = self._graphs.get(instance_id)
            if graph is not None:
                self._graphs.move_to_end(instance_id)
                return graph
        graph = view.graph()
        with self._graphs_lock:
            self._graphs[instance_id] = graph
            while len(self._graphs) > 512:
                self._graphs.popitem(last=False)
        return graph


def _loop_state(graph: Graph, view: LogView, node: str, run: int) -> LoopState | None:
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
    return LoopState(entry=previous is None, previous=previous, result=result)


def _error_info(node: str, exc: BaseException) -> dict[str, Any]:
    code = exc.code if isinstance(exc, StepFailure) else type(exc).__name__
    return {
        "node": node,
        "code": code,
        "message": str(exc) or type(exc).__name__,
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
    }
