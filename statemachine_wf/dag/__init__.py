"""DAG workflows on the same log, CAS, task claiming, leases and retries as state machines.

Define a graph (:class:`DagDefinition`, from JSON with :func:`load` or in Python with
:class:`DagBuilder`), register the functions its ``python`` nodes call in a
:class:`Registry`, start it with :class:`DagClient` and run it with a
:class:`~statemachine_wf.Runner` given ``dags=registry``.
"""

from .client import DagClient
from .handlers import NodeContext, NodeResult, Registry, node_context
from .interpret import DagDecision
from .models import (
    DEFAULT_DAG_TYPE,
    DagBuilder,
    DagDefinition,
    Edge,
    Graph,
    Node,
    NodeRetry,
    check,
    load,
)
from .templates import TemplateError, resolve

__all__ = [
    "DEFAULT_DAG_TYPE",
    "DagBuilder",
    "DagClient",
    "DagDecision",
    "DagDefinition",
    "Edge",
    "Graph",
    "Node",
    "NodeContext",
    "NodeResult",
    "NodeRetry",
    "Registry",
    "TemplateError",
    "check",
    "load",
    "node_context",
    "resolve",
]
