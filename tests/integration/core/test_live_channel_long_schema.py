"""The statements that grow a watched log (migration 021; the trigger of 008 before it)
and ``live_channel`` use the same channel, on the real PostgreSQL: events appended to a
watched instance are announced on the channel the listener LISTENs on. They decide by
characters while the limit is in bytes, which could differ only for a non-ASCII schema,
and the store refuses any schema that is not an ASCII lowercase identifier before
anything is created or notified. It also refuses a schema over 54 characters, whose wake
channel swf_wake_<schema> would not fit in 63 bytes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from statemachine_wf import Client
from statemachine_wf.stores._pglive import live_channel
from statemachine_wf.stores.postgres import PostgresStore
from tests.plugins.stores import PG_DSN
from tests.unit.core.workflows import ThreeSteps


@pytest.fixture(params=[9, 54])
def long_schema(request: pytest.FixtureRequest) -> Iterator[str]:
    head = f"swf_t_{uuid.uuid4().hex[:12]}_"
    schema = (head + "x" * 63)[: request.param]
    yield schema
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_a_watched_instance_is_announced_on_the_listeners_channel(long_schema: str) -> None:
    channel = live_channel(long_schema)
    assert len(channel.encode()) <= 63
    assert channel.startswith("swf_live_")
    assert (channel == f"swf_live_{long_schema}") == (len(long_schema) <= 54)
    store = PostgresStore(PG_DSN, schema=long_schema, listen=False)
    try:
        store.migrate()
        instance_id = Client(store, [ThreeSteps]).start(ThreeSteps, {"n": 1})
        with psycopg.connect(PG_DSN, autocommit=True) as listener:
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            loop = asyncio.new_event_loop()
            sub = store.live_hub().subscribe(instance_id, loop)  # registered, as watch() does
            try:
                Client(store, [ThreeSteps]).cancel(instance_id)  # appends events
                got = next(iter(listener.notifies(timeout=10)), None)
            finally:
                sub.close()
                loop.close()
        assert got is not None
        assert got.channel == channel
        assert got.payload.startswith(f"{instance_id} ")
    finally:
        store.close()


@pytest.mark.parametrize("schema", ["é" * 30, "swf_" + "ü" * 20, "Swf", "swf\n"])
def test_a_schema_that_is_not_an_ascii_identifier_is_refused(schema: str) -> None:
    with pytest.raises(ValueError, match="schema must be a lowercase identifier"):
        PostgresStore(PG_DSN, schema=schema)


@pytest.mark.parametrize("length", [55, 63])
def test_a_schema_whose_wake_channel_would_not_fit_is_refused_before_anything(
    length: int,
) -> None:
    """swf_wake_<schema> must fit PostgreSQL's 63-byte names: pg_notify refuses a longer
    channel, which would have failed every start. Refused with the reason, nothing made."""
    schema = (f"swf_t_{uuid.uuid4().hex[:12]}_" + "x" * 63)[:length]
    with pytest.raises(ValueError, match="at most 54 characters"):
        PostgresStore(PG_DSN, schema=schema)
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        found = conn.execute(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    assert found is None
