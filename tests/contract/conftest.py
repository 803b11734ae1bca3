"""The contract suite runs three stores: SQLite, PostgreSQL, and PostgreSQL with every
grouped kind of decision sent through its group-commit statement (``group_min=1``: a lone
one too, so each test's plain Continues, finishes and their claims, and plain DAG node
commits take the shared statements instead of their own; docs/architecture.md, "Group
commit on PostgreSQL").

PostgreSQL's ``dag_sticky`` is off here: the contract is what any runner's claim may take,
as on SQLite, and several tests race two runners on one instance's dispatched tasks, which
a runner takes at once only once the stickiness is over (tests/integration/dag/
test_sticky.py tests it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.stores import PG_DSN


@pytest.fixture(params=["sqlite", "postgres", "postgres-grouped"])
def store_url(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(url, options)`` to open the same store from another process or thread."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'swf.db'}", {}
        return
    options: dict[str, Any] = {"schema": request.getfixturevalue("pg_schema"), "dag_sticky": 0}
    if request.param == "postgres-grouped":
        options["group_min"] = 1
    yield PG_DSN, options
