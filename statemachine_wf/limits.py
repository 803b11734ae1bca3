"""Size limits on what producers hand the runtime, checked before anything is written.

A payload (a run's input, a signal's payload) is measured as the compact JSON the store
keeps. The default limit is 256 KiB, like Temporal's default blob warning size scaled down
for a row in a relational table; ``SWF_MAX_PAYLOAD_BYTES`` changes it. The SQL producer
paths check the limit too, read from the ``wf_settings`` row ``max_payload_bytes``
(migrations 006 and 009); PostgreSQL measures the JSON text it stores (a space after each ``,`` and
``:``), so near the limit it can refuse what this module's compact measure let through.
"""

from __future__ import annotations

import json
from typing import Any

from .config import Config
from .errors import DefinitionError, PayloadTooLarge

DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024


def max_payload_bytes() -> int:
    """The limit in force: ``SWF_MAX_PAYLOAD_BYTES`` if set, else 256 KiB."""
    configured = configured_max_payload_bytes()
    return DEFAULT_MAX_PAYLOAD_BYTES if configured is None else configured


def configured_max_payload_bytes() -> int | None:
    """``SWF_MAX_PAYLOAD_BYTES`` if set (validated), else None.

    ``migrate`` writes it to the ``wf_settings`` row ``max_payload_bytes`` that the SQL
    producer paths (``swf_start``, the ``wf_start`` view, inserts into ``wf_signals``)
    check; when it is not set the row keeps its value.
    """
    return Config.payload_limit_from_env()


def check_payload(what: str, value: Any, limit: int | None = None) -> int:
    """Return the JSON size of ``value`` in bytes.

    Raises:
        PayloadTooLarge: it is over ``limit`` (default :func:`max_payload_bytes`); the
            message names ``what``, the size and the limit.
    """
    size = len(json.dumps(value, separators=(",", ":"), default=str).encode())
    cap = max_payload_bytes() if limit is None else limit
    if size > cap:
        raise PayloadTooLarge(what, size, cap)
    return size


def max_dag_bytes() -> int:
    """The largest DAG definition, as JSON bytes: ``SWF_MAX_DAG_BYTES``, else 2 MiB."""
    return Config.dag_limit_from_env("SWF_MAX_DAG_BYTES")


def max_dag_nodes() -> int:
    """The most nodes in one DAG definition: ``SWF_MAX_DAG_NODES``, else 10,000."""
    return Config.dag_limit_from_env("SWF_MAX_DAG_NODES")


def check_dag_size(name: str, size: int | None, nodes: int | None) -> None:
    """Refuse a DAG definition of ``size`` JSON bytes or ``nodes`` nodes over the limits.

    Raises:
        DefinitionError: naming the limit, the value and the setting that changes it.
    """
    problems = []
    if size is not None and size > (limit := max_dag_bytes()):
        problems.append(
            f"the definition is {size} bytes; the limit is {limit} bytes (SWF_MAX_DAG_BYTES)"
        )
    if nodes is not None and nodes > (limit := max_dag_nodes()):
        problems.append(f"it has {nodes} nodes; the limit is {limit} (SWF_MAX_DAG_NODES)")
    if problems:
        raise DefinitionError(f"DAG {name!r}", problems)
