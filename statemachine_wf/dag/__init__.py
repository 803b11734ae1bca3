"""DAG workflows on the same log, CAS, task claiming, leases and retries as state machines.

Define a graph (:class:`DagDefinition`, from JSON with :func:`load` or in Python with
:class:`DagBuilder`), register the functions its ``python`` nodes call in a
:class:`Registry`, start it with :class:`DagClient` and run it with a
:class:`~statemachine_wf.Runner` given ``dags=registry``.
"""

from typing import TYPE_CHECKING

from ..core.dag_interpret import DagDecision
from ..definition.dag_definition import DEFAULT_DAG_TYPE, DagDefinition, Edge, Node, NodeRetry
from ..definition.dag_models import DagBuilder, Graph, check, load
from ..definition.dag_templates import TemplateError, resolve
from ..runtime.dag_handlers import NodeContext, NodeResult, Registry, node_context

if TYPE_CHECKING:
    from ..client.dag import DagClient


def __getattr__(name: str) -> object:
    # DagClient is a layer above the rest of this package: it operates through
    # ``statemachine_wf.runtime.operations``, which builds on the pure ``interpret``. Importing
    # it eagerly here would make every import of the DAG core load the client layer
    # (and loop back into ``operations`` half-initialised), so it loads on first use.
    if name == "DagClient":
        from ..client.dag import DagClient

        return DagClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
