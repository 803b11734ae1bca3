"""``argv``: the ``--db`` (and ``--schema``) arguments that point ``main`` at the test's
store, SQLite or PostgreSQL (the ``store_url`` fixture)."""

from __future__ import annotations

import pytest


@pytest.fixture
def argv(store_url: tuple[str, dict[str, str]]) -> list[str]:
    url, options = store_url
    return ["--db", url, *(["--schema", options["schema"]] if options else [])]
