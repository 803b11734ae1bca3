"""Store fixtures: every contract test runs on SQLite and on the real PostgreSQL server.

PostgreSQL comes from ``SWF_TEST_PG_DSN`` (default: the local trust-auth server); each
test gets a fresh schema, dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from statemachine_wf.core.store import Store
from statemachine_wf.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from statemachine_wf.stores.postgres import PostgresStore

PG_DSN = os.environ.get("SWF_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


def fresh_schema() -> str:
    return f"swf_t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def pg_dsn() -> str:
    return PG_DSN


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A schema name for this test; dropped at the end (whoever created it)."""
    schema = fresh_schema()
    yield schema
    import psycopg
    from psycopg import sql

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def sqlite_path(tmp_path: Path) -> str:
    return str(tmp_path / "swf.db")


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, dict[str, str]]]:
    """``(url, options)`` to open the same store from another process or thread."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'swf.db'}", {}
    else:
        schema = request.getfixturevalue("pg_schema")
        yield PG_DSN, {"schema": schema}


@pytest.fixture
def store(store_url: tuple[str, dict[str, str]]) -> Iterator[Store]:
    from statemachine_wf.stores import open_store

    url, options = store_url
    s = open_store(url, **options)
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def pg_store(pg_dsn: str, pg_schema: str) -> Iterator[PostgresStore]:
    """A migrated PostgreSQL store in this test's schema (for PostgreSQL-only tests)."""
    from statemachine_wf.stores.postgres import PostgresStore

    store = PostgresStore(pg_dsn, schema=pg_schema)
    store.migrate()
    yield store
    store.close()


@pytest.fixture
def pg_other_store(pg_dsn: str, pg_schema: str, pg_store: PostgresStore) -> Iterator[PostgresStore]:
    """A second store object on ``pg_store``'s schema: another process, as far as its
    LISTEN connection, its channel and the starts leased across processes go."""
    from statemachine_wf.stores.postgres import PostgresStore

    store = PostgresStore(pg_dsn, schema=pg_schema)
    yield store
    store.close()


@pytest.fixture
def sqlite_store(sqlite_path: str) -> Iterator[SQLiteStore]:
    s = SQLiteStore(sqlite_path)
    s.migrate()
    yield s
    s.close()


def listen_pids(admin: object, channel: str) -> list[int]:
    """The backends LISTENing on ``channel`` (``admin``: a psycopg connection)."""
    import psycopg

    assert isinstance(admin, psycopg.Connection)
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE query = %s", (f'LISTEN "{channel}"',)
    ).fetchall()
    return [int(r[0]) for r in rows]
