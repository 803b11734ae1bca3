"""How a PostgreSQL store's rows come back: the loaders set on each pooled connection."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.pq import Format
from psycopg.types.json import set_json_loads

from ._common import loads

_TEXT = psycopg.adapters.get_loader(psycopg.adapters.types["text"].oid, Format.TEXT)


def configure_loaders(conn: psycopg.Connection[Any]) -> None:
    """Set ``conn``'s loaders for the values the store reads.

    json and jsonb decode with :func:`~._common.loads`: a value nested too deep for
    Python becomes Undecodable instead of raising RecursionError out of a fetch (which
    left a claimed task leased for ever). A uuid comes back as its text, the form every
    id takes in this library: a ``uuid.UUID`` made for each id read, then turned into
    text by ``str()``, was about 1% of a runner's CPU (bench/README.md, "Session 57").
    """
    set_json_loads(loads, conn)
    if _TEXT is not None:
        conn.adapters.register_loader("uuid", _TEXT)
