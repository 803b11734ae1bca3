"""The dashboard's paging over a big table: ``python -m bench paging [--rows 1000000]``.

A fresh store of each kind gets ``--rows`` instances written by SQL (a status mix,
``created_at`` spread over a year, as if they had run), then ``Store.page_instances`` is
timed: the first page, a page half-way down reached by its keyset cursor, a status filter,
a type prefix and a lookup by id; each the median of ``--repeat`` calls, in ms. The page
should cost the same at any depth (one range of the ``wf_instances_recent`` index).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from statemachine_wf import Status, open_store

from .core import pg_dsn

PG_FILL = """
INSERT INTO wf_instances (id, type, kind, status, step, input, created_at, updated_at)
SELECT gen_random_uuid(), 'bench.t' || (g %% 5) || '.v1', 'machine',
       (ARRAY['COMPLETED','COMPLETED','COMPLETED','FAILED','RUNNING','STALLED'])[1 + g %% 6],
       'done', '{}', now() - (g || ' seconds')::interval * 31,
       now() - (g || ' seconds')::interval * 31
FROM generate_series(1, %s) AS g
"""
SQLITE_FILL = """
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
INSERT INTO wf_instances (id, type, kind, status, step, input, created_at, updated_at)
SELECT lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' ||
             substr(hex(randomblob(2)), 2) || '-a' || substr(hex(randomblob(2)), 2) || '-' ||
             hex(randomblob(6))),
       'bench.t' || (n % 5) || '.v1', 'machine',
       CASE n % 6 WHEN 3 THEN 'FAILED' WHEN 4 THEN 'RUNNING' WHEN 5 THEN 'STALLED'
                  ELSE 'COMPLETED' END,
       'done', '{}', strftime('%s', 'now') - n * 31, strftime('%s', 'now') - n * 31
FROM g
"""


def _ms(call: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def measure(store: Any, rows: int, repeat: int) -> dict[str, float]:
    first = store.page_instances(limit=50)
    cursor = first[-1].id
    deep = None
    # Walk to about half-way with big pages (not timed), then time a 50-row page there.
    walked = 0
    while walked < rows // 2:
        page = store.page_instances(after=cursor, limit=5000)
        if not page:
            break
        cursor, walked = page[-1].id, walked + len(page)
    deep = cursor
    return {
        "first page": _ms(lambda: store.page_instances(limit=50), repeat),
        f"page at row ~{walked:,}": _ms(lambda: store.page_instances(after=deep, limit=50), repeat),
        "status=STALLED": _ms(
            lambda: store.page_instances(status=[Status.STALLED], limit=50), repeat
        ),
        "type prefix": _ms(lambda: store.page_instances(type_prefix="bench.t3", limit=50), repeat),
        "by id": _ms(lambda: store.page_instances(ident=first[10].id), repeat),
    }


def main(rows: int, repeat: int, stores: list[str]) -> int:
    for kind in stores:
        if kind == "pg":
            import psycopg

            schema = f"swfbench_paging_{os.getpid()}"
            store: Any = open_store(pg_dsn(), schema=schema)
            store.migrate()
            with psycopg.connect(pg_dsn(), autocommit=True) as conn:
                conn.execute(f"SET search_path TO {schema}")  # a name we made: not user input
                conn.execute(PG_FILL, (rows,))
                conn.execute("ANALYZE wf_instances")
        else:
            import sqlite3

            path = os.path.join(tempfile.mkdtemp(), "paging.db")
            store = open_store(f"sqlite:///{path}")
            store.migrate()
            with sqlite3.connect(path) as conn:
                conn.execute(SQLITE_FILL, (rows,))
                conn.execute("ANALYZE")
        try:
            print(f"{kind}: {rows:,} instances, median of {repeat} calls, ms")
            for what, ms in measure(store, rows, repeat).items():
                print(f"    {what:<24} {ms:8.2f}")
        finally:
            if kind == "pg":
                store.drop_schema()
            store.close()
    return 0
