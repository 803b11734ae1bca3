"""Reading a DAG definition from untrusted input: JSON text or a mapping to a
:class:`~statemachine_wf.definition.dag_definition.DagDefinition`, refused early when it is over
the size limits, and pydantic's errors reported at node ids rather than list indexes.

Nothing here looks at the graph: :func:`~statemachine_wf.definition.dag_models.load` parses with
:func:`parse` and then checks the graph.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ..errors import DefinitionError
from .dag_definition import DagDefinition
from .limits import check_dag_size


def parse(data: str | bytes | Mapping[str, Any] | DagDefinition) -> DagDefinition:
    """A definition from JSON text or a mapping, its size and fields checked but not yet
    its graph (:func:`~statemachine_wf.definition.dag_models.load` is this, then ``check``).

    Raises:
        DefinitionError: every size and structural problem found.
    """
    # Already a model, fields checked when it was built: only its size is left to check.
    if isinstance(data, DagDefinition):
        check_size(data)
        return data
    if isinstance(data, str | bytes):
        # Measured before parsing: a huge text is refused without building it.
        size = len(data.encode() if isinstance(data, str) else data)
        check_dag_size("DAG", size, None)
    try:
        raw = json.loads(data) if isinstance(data, str | bytes) else dict(data)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise DefinitionError("DAG", [f"not JSON: {exc}"]) from None
    # Cut to the model's 200-character limit: it labels errors raised before any check.
    name = str(raw.get("name", "DAG"))[:200] if isinstance(raw, dict) else "DAG"
    if isinstance(raw, dict):
        nodes = raw.get("nodes")
        # Text was measured above; a mapping is measured as the JSON it would be stored as.
        check_dag_size(
            name,
            None if isinstance(data, str | bytes) else _json_size(raw),
            len(nodes) if isinstance(nodes, list) else None,
        )
    try:
        return DagDefinition.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = _where(raw, err["loc"])
            problems.append(f"{where}: {err['msg']}")
        raise DefinitionError(f"DAG {name!r}", problems) from None


def _json_size(raw: Any) -> int:
    # default=str: a value JSON cannot encode is counted as its text, not refused here
    # (the model refuses it with a better message).
    try:
        return len(json.dumps(raw, separators=(",", ":"), default=str).encode())
    except (ValueError, RecursionError) as exc:
        raise DefinitionError("DAG", [f"not JSON-serialisable: {exc}"]) from None


def check_size(definition: DagDefinition) -> None:
    """Refuse a definition over ``SWF_MAX_DAG_BYTES`` (its JSON) or ``SWF_MAX_DAG_NODES``.

    Raises:
        DefinitionError: naming the limit, the value and the setting.
    """
    check_dag_size(definition.name, _json_size(definition.dump()), len(definition.nodes))


def _where(raw: Any, loc: tuple[int | str, ...]) -> str:
    """A pydantic error location, with node indexes shown as node ids where known."""
    parts = []
    cur = raw
    # Walks the raw input beside pydantic's location, so ``nodes.3.config`` becomes
    # ``nodes['fetch'].config``: the editor's user knows ids, not list positions.
    for p in loc:
        if isinstance(p, int) and isinstance(cur, list) and p < len(cur):
            item = cur[p]
            ident = item.get("id") if isinstance(item, dict) else None
            parts.append(f"[{ident!r}]" if ident is not None else f"[{p}]")
            cur = item
        else:
            parts.append(f".{p}" if parts else str(p))
            cur = cur.get(p) if isinstance(cur, dict) else None
    return "".join(parts) or "definition"
