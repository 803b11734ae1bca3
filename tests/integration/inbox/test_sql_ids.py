"""An id given to a SQL producer (``swf_start(..., id => ...)``, ``INSERT INTO wf_start
(id, ...)``) must be a UUID in its canonical form, as ``check_id`` wants it in Python;
any other spelling is refused alike on both stores, and nothing is written (migration 016).

Before: PostgreSQL's ``uuid`` parameter turned ``'ABC...'``, ``'{...}'`` or bare hex into
the canonical id and stored that, while SQLite's view stored the text as typed (any text
at all), an instance the Python client could not name: ``Client.get`` refused the
spelling and found nothing under the canonical id.
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

import psycopg
import pytest

import statemachine_wf.stores._base as store_base
from statemachine_wf import Client, Status, Store
from statemachine_wf.stores import open_store
from statemachine_wf.stores._sql import migrations
from tests.plugins.stores import PG_DSN

from .flows import Echo, run_all

StoreUrl = tuple[str, dict[str, str]]
CANONICAL_FORM = "is not a UUID in its canonical form, lowercase and hyphenated"
NEW_SIGNATURE = "swf_start(text, jsonb, text, integer, timestamptz, anycompatible)"


def sql_start(store_url: StoreUrl, type_name: str, key: str, instance_id: Any) -> Any:
    """The one-statement SQL start with an id, as a producer writes it (the id a bound
    parameter, a string as a driver sends it); the id the start returns on PostgreSQL."""
    url, options = store_url
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(
                "INSERT INTO wf_start (id, type, input, idempotency_key) VALUES (?, ?, ?, ?)",
                (instance_id, type_name, '{"n": 3}', key),
            )
        return None
    with psycopg.connect(
        url, autocommit=True, options=f"-c search_path={options['schema']}"
    ) as conn:
        row = conn.execute(
            "SELECT swf_start(%s, %s::jsonb, idempotency_key => %s, id => %s)",
            (type_name, '{"n": 3}', key, instance_id),
        ).fetchone()
        return None if row is None else row[0]


def spellings(canonical: str) -> list[str]:
    return [
        canonical.upper(),
        "{" + canonical + "}",
        canonical.replace("-", ""),
        "urn:uuid:" + canonical,
    ]


@pytest.mark.parametrize("type_name", ["inbox.echo.v1", "inbox.nobody.v1"])
def test_a_non_canonical_id_is_refused_alike_and_nothing_is_written(
    store: Store, store_url: StoreUrl, type_name: str
) -> None:
    store.register_types([Echo.spec().workflow_type], by="test")
    canonical = str(uuid.uuid4())
    for n, spelling in enumerate([*spellings(canonical), "not-a-uuid", "x" * 100]):
        with pytest.raises((sqlite3.Error, psycopg.Error)) as refused:
            sql_start(store_url, type_name, f"k-{n}", spelling)
        message = str(refused.value)
        assert CANONICAL_FORM in message
        if store.dialect == "postgres":
            assert isinstance(refused.value, psycopg.errors.InvalidTextRepresentation)
            if spelling in spellings(canonical):
                assert f"use '{canonical}'" in message  # names the id to use
            else:
                assert canonical not in message
            assert "x" * 61 not in message  # a long value is not quoted whole
    # Nothing written: no instance, no task, no dead letter (an unknown type included).
    assert store.list_instances() == []
    assert store.dead_letters() == []
    assert store.task(canonical) is None
    with pytest.raises((sqlite3.Error, psycopg.Error), match=CANONICAL_FORM):
        sql_start(store_url, type_name, "k-int", 7)  # not text at all


def test_a_canonical_id_is_the_instance_the_client_reads_back(
    store: Store, store_url: StoreUrl
) -> None:
    store.register_types([Echo.spec().workflow_type], by="test")
    given = str(uuid.uuid4())
    returned = sql_start(store_url, "inbox.echo.v1", "k-1", given)
    if store.dialect == "postgres":
        assert str(returned) == given
    run_all(store, [Echo])
    record = Client(store).get(given)
    assert (record.id, record.status, record.progress) == (given, Status.COMPLETED, {"doubled": 6})
    # No id: one is made, canonical; the same key returns the first run whatever id comes.
    sql_start(store_url, "inbox.echo.v1", "k-2", None)
    [made] = [r.id for r in store.list_instances() if r.idempotency_key == "k-2"]
    assert made == str(uuid.UUID(made))
    again = sql_start(store_url, "inbox.echo.v1", "k-1", str(uuid.uuid4()))
    if store.dialect == "postgres":
        assert str(again) == given
    assert len(store.list_instances()) == 2


@pytest.mark.postgres
def test_swf_start_still_takes_a_uuid_value_and_positional_arguments(pg_schema: str) -> None:
    store = open_store(PG_DSN, schema=pg_schema)
    store.migrate()
    try:
        store.register_types([Echo.spec().workflow_type], by="test")
        typed, positional = uuid.uuid4(), str(uuid.uuid4())
        with psycopg.connect(PG_DSN, autocommit=True, options=f"-c search_path={pg_schema}") as c:
            # A uuid value (psycopg sends uuid.UUID as uuid): canonical by construction.
            one = c.execute("SELECT swf_start('inbox.echo.v1', '{}'::jsonb, id => %s)", (typed,))
            assert one.fetchone() == (typed,)
            two = c.execute(
                "SELECT swf_start('inbox.echo.v1', '{}'::jsonb, 'k', 5, now(), %s)",
                (positional,),
            )
            assert two.fetchone() == (uuid.UUID(positional),)
            three = c.execute("SELECT swf_start('inbox.echo.v1', '{}'::jsonb, id => NULL)")
            assert three.fetchone()[0] is not None  # type: ignore[index]
            # Untouched grants: the default, EXECUTE for everyone, as before.
            public = c.execute(
                "SELECT has_function_privilege('public', %s, 'EXECUTE')", (NEW_SIGNATURE,)
            )
            assert public.fetchone() == (True,)
        assert {str(typed), positional} <= {r.id for r in store.list_instances()}
    finally:
        store.close()


def _swf_start_acl(schema: str) -> set[tuple[str, str]]:
    with psycopg.connect(PG_DSN, autocommit=True, options=f"-c search_path={schema}") as c:
        rows = c.execute(
            "SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END,"
            " a.privilege_type FROM pg_proc p, aclexplode(p.proacl) a"
            " WHERE p.oid = %s::regprocedure",
            (NEW_SIGNATURE,),
        ).fetchall()
    return {(str(r[0]), str(r[1])) for r in rows}


@pytest.mark.postgres
def test_migration_016_keeps_the_grants_on_swf_start(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator who revoked EXECUTE from PUBLIC and granted it to a producer role keeps
    that after the function is replaced (pg_monitor stands in for the producer role)."""
    monkeypatch.setattr(
        store_base, "migrations", lambda dialect: [m for m in migrations(dialect) if m[0] < 16]
    )
    store = open_store(PG_DSN, schema=pg_schema)
    try:
        store.migrate()
        old = "swf_start(text, jsonb, text, integer, timestamptz, uuid)"
        with psycopg.connect(PG_DSN, autocommit=True, options=f"-c search_path={pg_schema}") as c:
            c.execute(f"REVOKE EXECUTE ON FUNCTION {old} FROM PUBLIC")
            c.execute(f"GRANT EXECUTE ON FUNCTION {old} TO pg_monitor")
        monkeypatch.undo()
        store.migrate()
        acl = _swf_start_acl(pg_schema)
        assert ("pg_monitor", "EXECUTE") in acl
        assert ("PUBLIC", "EXECUTE") not in acl
    finally:
        store.close()
