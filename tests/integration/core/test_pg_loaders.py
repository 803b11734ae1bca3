"""The PostgreSQL store's connections read a uuid as its text and json through the store's
guarded decoder (``stores/_pgtypes.py``): every id in the library is text, and a uuid
loaded as a ``uuid.UUID`` only to be turned back into text cost a runner about 1% of its
CPU (bench/README.md, "Session 57")."""

from __future__ import annotations

from statemachine_wf.stores._common import Undecodable
from statemachine_wf.stores.postgres import PostgresStore


def test_a_uuid_column_reads_as_its_text(pg_store: PostgresStore) -> None:
    with pg_store._reading() as conn:
        row = conn.execute(
            "SELECT '0190f3c2-1234-7abc-8def-0123456789ab'::uuid AS id, NULL::uuid AS none,"
            " ARRAY['0190f3c2-1234-7abc-8def-0123456789ab'::uuid] AS ids"
        ).fetchone()
    assert row is not None
    assert row["id"] == "0190f3c2-1234-7abc-8def-0123456789ab"
    assert type(row["id"]) is str
    assert row["none"] is None
    assert row["ids"] == ["0190f3c2-1234-7abc-8def-0123456789ab"]


def test_json_too_deep_for_python_reads_as_undecodable(pg_store: PostgresStore) -> None:
    deep = "[" * 5000 + "]" * 5000
    with pg_store._reading() as conn:
        row = conn.execute("SELECT %s::json AS v", (deep,)).fetchone()
    assert row is not None
    assert isinstance(row["v"], Undecodable)
