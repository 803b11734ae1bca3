"""What a DAG node's failure commits (``DagExecutor`` hands it here): a retry with the
node's backoff, its ``error`` handle, or the instance failed; and for an internal error of
the runtime (:class:`~.dag_handlers.InternalError`), a retry whatever the node's policy
says and, if it lasts, the error raised to the runner, which quarantines the instance."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import ValidationError

from ..core import dag_interpret as interpret
from ..core.dag_interpret import DagDecision, LogView, TaskRetry
from ..core.store import Claim, DagSnapshot
from ..definition.dag_definition import ERROR_HANDLE
from ..definition.dag_models import Graph
from ..definition.dag_templates import TemplateError
from ..definition.events import Ev, NewEvent
from ..errors import Fail, InputError, StepFailure
from . import observe
from .dag_handlers import InternalError, NodeResult

log = logging.getLogger("statemachine_wf.dag")

INTERNAL_ATTEMPTS = 5
"""Tries of a node whose runs fail for an internal error of the runtime before the
instance is quarantined (STALLED) instead."""

_NOT_RETRYABLE = (Fail, TemplateError, InputError, ValidationError, TypeError)
"""Errors that another try cannot fix: bad config, a missing template path, bad args."""


class Commits(Protocol):
    """The executor's two commits a failure uses."""

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
        snap: DagSnapshot | None = None,
        taken: list[Claim] | None = None,
    ) -> bool: ...

    def commit_loop(
        self,
        instance_id: str,
        make: Callable[[DagSnapshot, LogView], DagDecision | None],
        snap: DagSnapshot | None = None,
        taken: list[Claim] | None = None,
    ) -> bool: ...


def failed(ex: Commits, graph: Graph, claim: Claim, run: int, exc: BaseException) -> None:
    """Commit what ``claim``'s node failing with ``exc`` leads to (see the module)."""
    instance_id, node = claim.instance.id, claim.task.slot
    if isinstance(exc, InternalError):
        internal_error(ex, graph, claim, run, exc)
        return
    retryable = not isinstance(exc, _NOT_RETRYABLE)
    info = error_info(node, exc)
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
    gives_up = interpret.gives_up(graph, node, failures=failures, retryable=retryable)
    observe.mark("failed" if gives_up else "retried")
    if spec.error_handling == "continue" and gives_up:
        ex.complete(
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

    ex.commit_loop(instance_id, decide)


def internal_error(ex: Commits, graph: Graph, claim: Claim, run: int, exc: InternalError) -> None:
    """The runtime failed, not the node: try again later (whatever the node's own
    retry policy or error handling says); after :data:`INTERNAL_ATTEMPTS` the error
    goes to the runner, which quarantines the instance (STALLED, redrivable), never
    FAILED."""
    instance_id, node = claim.instance.id, claim.task.slot
    failures = claim.task.failures + 1
    log.warning(
        "instance %s: node %s (run %d, try %d): internal error %s",
        instance_id,
        node,
        run,
        claim.task.attempt,
        exc,
    )
    observe.mark("retried")
    if failures >= INTERNAL_ATTEMPTS:
        raise exc
    delay = graph.nodes[node].retry_policy().delay(failures)
    info = {**error_info(node, exc), "internal": True}

    def decide(snap: DagSnapshot, view: LogView) -> DagDecision | None:
        if snap.instance.status.terminal or view.settled(node, run):
            return None
        if node not in snap.open_slots:
            return None
        payload = {"run": run, "failures": failures, "retry_in": round(delay, 3)}
        return DagDecision(
            events=(NewEvent(Ev.NODE_RETRYING, node, None, payload, info),),
            retry=TaskRetry(node, delay, failures),
        )

    ex.commit_loop(instance_id, decide)


def error_info(node: str, exc: BaseException) -> dict[str, Any]:
    code = exc.code if isinstance(exc, StepFailure) else type(exc).__name__
    return {
        "node": node,
        "code": code,
        "message": str(exc) or type(exc).__name__,
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
    }
