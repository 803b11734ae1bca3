"""DAG definitions as data: nodes, edges, join modes and each node type's config, as
pydantic models, and what each node type can produce.

A definition is plain data, loadable from the editor's JSON (``sourceHandle``,
``joinMode``, ``outputVariable``, ``errorHandling`` are accepted beside their
snake_case names). The models check each field; whether a whole graph can run is
decided by :func:`~statemachine_wf.definition.dag_models.check`, which reads the rules of each node
type here (:data:`NODE_CONFIGS`, :func:`produced_handles`, :func:`_config_problems`).
"""

from __future__ import annotations

import ast
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator
from pydantic.alias_generators import to_camel

from .dag_expressions import compile_expression
from .retry import RetryPolicy

DEFAULT_DAG_TYPE = "swf.dag"
"""The task type DAG instances are queued under unless their definition names another."""

ERROR_HANDLE = "error"
LOOP_HANDLE = "loop"
DONE_HANDLE = "done"
ELSE_HANDLE = "else"

JoinMode = Literal["all", "any"]
ErrorHandling = Literal["continue", "fail_workflow"]


class _Model(BaseModel):
    # camelCase aliases read the editor's JSON; extra="forbid" makes a misspelt key an
    # error rather than a setting silently left at its default; frozen, so a definition
    # cannot change after check() has passed it.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class Position(_Model):
    x: float = 0.0
    y: float = 0.0


class NodeRetry(_Model):
    """Retries of a failing node before its error handling applies (1 = no retry)."""

    max_attempts: int = Field(default=3, ge=1, le=100)
    initial_delay: float = Field(default=1.0, ge=0)
    max_delay: float = Field(default=60.0, ge=0)
    multiplier: float = Field(default=2.0, ge=1)

    def policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.max_attempts,
            initial_delay=self.initial_delay,
            max_delay=self.max_delay,
            multiplier=self.multiplier,
            jitter=False,
            on_exhausted="fail",
        )


class Node(_Model):
    """One node: ``type`` picks the handler, ``config`` is its (templated) settings.

    Attributes:
        join: ``all`` (every incoming edge fired) or ``any`` (at least one).
        output_variable: the context key its output is written to (default: its id).
        error_handling: ``fail_workflow`` (retry per ``retry``, then the instance
            FAILS) or ``continue`` (follow the ``error`` handle with the error as output).
    """

    id: str = Field(min_length=1, max_length=200)
    type: str
    config: dict[str, Any] = Field(default_factory=dict)
    position: Position | None = None
    label: str | None = None
    join: JoinMode = Field(default="all", alias="joinMode")
    output_variable: str | None = None
    error_handling: ErrorHandling = "fail_workflow"
    retry: NodeRetry | None = None

    @property
    def variable(self) -> str:
        return self.output_variable or self.id

    def retry_policy(self) -> RetryPolicy:
        if self.retry is not None:
            return self.retry.policy()
        # A node whose error is an output to follow does not retry unless asked to.
        attempts = 1 if self.error_handling == "continue" else 3
        return NodeRetry(max_attempts=attempts).policy()


class Edge(_Model):
    """``source`` -> ``target``, taken when the source finishes with ``source_handle``.

    ``source_handle`` None is a node's default output; a condition names a branch
    (or ``else``), a loop ``loop`` or ``done``, a ``continue`` node may add ``error``.
    """

    source: str
    target: str
    source_handle: str | None = None
    id: str | None = None


class DagDefinition(_Model):
    """A whole graph. ``type`` is the task type its instances are queued under."""

    name: str = Field(min_length=1, max_length=200)
    nodes: list[Node]
    edges: list[Edge] = Field(default_factory=list)
    description: str = ""
    type: str = DEFAULT_DAG_TYPE

    def dump(self) -> dict[str, Any]:
        """The JSON form stored with an instance and in saved definitions."""
        return self.model_dump(mode="json", exclude_none=True)


# -- node configs -----------------------------------------------------------------------


class StartConfig(_Model):
    pass


class EndConfig(_Model):
    """``outputs``: name -> template; the resolved mapping is the workflow's output."""

    outputs: dict[str, Any] = Field(default_factory=dict)


class PythonConfig(_Model):
    """Call the function registered as ``function`` with the resolved ``args``."""

    function: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    timeout: float | None = Field(default=None, gt=0)


class DataQueryConfig(_Model):
    """Run the query registered as ``query`` with the resolved ``args``."""

    query: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    timeout: float | None = Field(default=None, gt=0)


class Branch(_Model):
    """``when``: an expression over ``ctx`` (see :mod:`.dag_expressions`), parsed and checked
    here, once, when the definition is loaded; runners evaluate the parsed form."""

    handle: str = Field(min_length=1)
    when: str = Field(min_length=1)
    _parsed: ast.expr | None = PrivateAttr(default=None)

    # Compiled twice, on purpose: the validator runs before the model exists, so it can
    # only refuse (its ValueError becomes a DefinitionError line at the branch's path);
    # the parsed form is kept by model_post_init, once the private attribute exists.
    @field_validator("when")
    @classmethod
    def _check_when(cls, value: str) -> str:
        compile_expression(value)  # an ExpressionProblem (a ValueError) names the problem
        return value

    def model_post_init(self, context: Any, /) -> None:
        self._parsed = compile_expression(self.when)

    @property
    def parsed(self) -> ast.expr:
        """The parsed ``when``."""
        if self._parsed is None:  # pragma: no cover - set by model_post_init
            self._parsed = compile_expression(self.when)
        return self._parsed


class ConditionConfig(_Model):
    """Branches in order; the first whose ``when`` is truthy names the handle, else ``else``."""

    branches: list[Branch] = Field(min_length=1)


class DelayConfig(_Model):
    """Complete ``seconds`` (a number or a template) after the node is reached: a durable
    timer (the node's task is due then), so nothing downstream of it runs before."""

    seconds: float | str


class LoopConfig(_Model):
    """Iterate ``items`` (a template resolving to a list): ``loop`` per item, then ``done``."""

    items: Any


class SubWorkflowConfig(_Model):
    """Run the state-machine workflow registered as ``workflow`` (its type name, e.g.
    ``shop.order.v1``) with ``input`` (templates) as a child instance and wait for its
    end: its progress is the node's output."""

    workflow: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)


NODE_CONFIGS: dict[str, type[_Model]] = {
    "start": StartConfig,
    "end": EndConfig,
    "python": PythonConfig,
    "data_query": DataQueryConfig,
    "condition": ConditionConfig,
    "delay": DelayConfig,
    "loop": LoopConfig,
    "sub_workflow": SubWorkflowConfig,
}


def produced_handles(node: Node, config: BaseModel) -> set[str | None]:
    """The handles ``node`` can finish with (None is the default output)."""
    # An end node finishes the instance: it has no output to follow, and check() reports
    # any edge out of it.
    if node.type == "end":
        return set()
    out: set[str | None]
    if node.type == "condition":
        if not isinstance(config, ConditionConfig):
            raise TypeError(f"{node.id}: expected ConditionConfig, got {config!r}")
        out = {b.handle for b in config.branches}
        out.add(ELSE_HANDLE)
    elif node.type == "loop":
        out = {LOOP_HANDLE, DONE_HANDLE}
    else:
        out = {None}
    # A start node does nothing that can fail, so it has no error to continue on.
    if node.error_handling == "continue" and node.type != "start":
        out.add(ERROR_HANDLE)
    return out


def _config_problems(node: Node, config: BaseModel) -> list[str]:
    problems = []
    if isinstance(config, ConditionConfig):
        handles = [b.handle for b in config.branches]
        if len(set(handles)) != len(handles):
            problems.append(f"node {node.id!r}: duplicate branch handles {handles}")
        for b in config.branches:
            # Taken by the runtime: "else" when no branch matches, "error" on failure.
            if b.handle in (ELSE_HANDLE, ERROR_HANDLE):
                problems.append(f"node {node.id!r}: branch handle {b.handle!r} is reserved")
    if node.type in ("start", "end") and node.error_handling == "continue":
        problems.append(f"node {node.id!r}: a {node.type} node has no error handle to continue on")
    return problems
