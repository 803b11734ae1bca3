"""The PostgreSQL store converts each query's ``%(name)s`` placeholders to ``$n`` once and
sends it through a raw cursor, so no execution parses the text again. psycopg caches its
own conversion only for texts under 4 KiB, and the claim outgrew that: it was re-parsed on
every call (bench/README.md, "The claim parsed once")."""

from __future__ import annotations

import re

import psycopg
import pytest

from statemachine_wf.errors import StoreError
from statemachine_wf.stores._pgconn import Q, execute, positional
from statemachine_wf.stores.postgres import PostgresStore


def test_placeholders_become_numbered_parameters_once_per_name() -> None:
    text, names = positional("SELECT %(a)s, %(b)s::int, %(a)s || 'x%%'")
    assert text == b"SELECT $1, $2::int, $1 || 'x%'"
    assert names == ("a", "b")


@pytest.mark.parametrize("bad", ["SELECT %s", "SELECT %(a)d", "SELECT 5 %"])
def test_a_placeholder_other_than_a_named_one_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="only %\\(name\\)s placeholders"):
        positional(bad)


def test_every_named_query_converts_completely() -> None:
    for name, query in Q.items():
        text, names = positional(query)
        decoded = text.decode()
        assert "%(" not in decoded, name
        assert len(names) == len(set(names)), name
        numbers = {int(n) for n in re.findall(r"\$(\d+)", decoded)}
        # every name has its number, and no number is left without a name
        assert numbers == set(range(1, len(names) + 1)), name
    # the query that outgrew psycopg's cache is among them
    assert len(Q["claim"].encode()) > 4096


def test_execute_binds_by_name_and_ignores_extra_keys(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        row = execute(
            conn,
            "SELECT %(a)s::int + %(b)s::int AS sum, %(a)s::int AS a",
            {"b": 2, "a": 40, "unused": object()},
        ).fetchone()
        assert row == {"sum": 42, "a": 40}


def test_a_missing_parameter_names_itself_and_runs_nothing(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.ProgrammingError, match="query parameter missing: b"):
            execute(conn, "SELECT %(a)s::int, %(b)s::int", {"a": 1})
        assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection is still usable


def test_through_the_store_a_missing_parameter_is_a_store_error(
    pg_dsn: str, pg_schema: str
) -> None:
    store = PostgresStore(pg_dsn, schema=pg_schema, listen=False)
    try:
        assert store.count_instances() == 0
        with pytest.raises(StoreError, match="query parameter missing: id"):
            store._one(Q["get_instance"], {})
    finally:
        store.close()
