"""The stores that ship with statemachine_wf, and ``open_store(url)`` to pick one.

``sqlite:///path.db`` (the default: ``sqlite:///statemachine_wf.db``) or
``postgresql://user@host:port/db``. The PostgreSQL store needs the ``[postgres]`` extra
and is imported only when asked for.
"""

from __future__ import annotations

from typing import Any

from ..store import Store

DEFAULT_URL = "sqlite:///statemachine_wf.db"


def open_store(url: str | None = None, **options: Any) -> Store:
    """Open the store named by ``url`` (see the module docstring)."""
    url = url or DEFAULT_URL
    if url.startswith("sqlite:///"):
        from .sqlite import SQLiteStore

        return SQLiteStore(url.removeprefix("sqlite:///") or ":memory:", **options)
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore

        return PostgresStore(url, **options)
    raise ValueError(f"unsupported store URL {url!r}: use sqlite:///path.db or postgresql://...")
