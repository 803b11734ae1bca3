"""One configuration path (``Config``) for the CLI and ``open_store``; listing and counting
instances through the ``Client``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from statemachine_wf import COMPLETED, Client, StepContext, Workflow, step
from statemachine_wf.core.store import Store
from statemachine_wf.definition.events import Status
from statemachine_wf.stores import open_store
from tests.plugins.stores import PG_DSN, fresh_schema

PACKAGE = Path(__file__).resolve().parents[3] / "statemachine_wf"


class In(BaseModel):
    n: int


class Out(BaseModel):
    pass


class Listed(Workflow[In, Out]):
    workflow_type = "listing.a.v1"

    @step(initial=True, to=COMPLETED)
    def go(self, ctx: StepContext[In, Out]) -> None: ...


class Other(Workflow[In, Out]):
    workflow_type = "listing.b.v1"

    @step(initial=True, to=COMPLETED)
    def go(self, ctx: StepContext[In, Out]) -> None: ...


def test_open_store_takes_the_schema_from_swf_pg_schema(
    monkeypatch: pytest.MonkeyPatch, pg_schema: str
) -> None:
    monkeypatch.setenv("SWF_PG_SCHEMA", pg_schema)
    store = open_store(PG_DSN)
    try:
        assert store.schema == pg_schema  # type: ignore[attr-defined]
        iid = Client(store).start(Listed, {"n": 1})
    finally:
        store.close()
    explicit = fresh_schema()
    other = open_store(PG_DSN, schema=explicit)  # an explicit schema wins over the variable
    try:
        assert other.schema == explicit  # type: ignore[attr-defined]
        assert other.get(iid) is None
    finally:
        other.close()
        import psycopg
        from psycopg import sql

        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(explicit))
            )
    again = open_store(PG_DSN)  # a producer and a CLI worker with the same environment agree
    try:
        assert again.get(iid) is not None
    finally:
        again.close()


def test_open_store_takes_the_url_from_swf_database_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SWF_DATABASE_URL", f"sqlite:///{tmp_path / 'env.db'}")
    store = open_store()
    store.migrate()
    store.close()
    assert (tmp_path / "env.db").exists()


def test_a_schema_for_sqlite_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="PostgreSQL only"):
        open_store(f"sqlite:///{tmp_path / 'x.db'}", schema="other")
    assert not (tmp_path / "x.db").exists()


def test_config_is_the_only_reader_of_swf_settings() -> None:
    pattern = re.compile(r"(environ|getenv)\b[^\n]*SWF_|SWF_[A-Z_]+\"?\s*\)?\s*in\s+os\.environ")
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.relative_to(PACKAGE).parts[0] not in {"adapters", "reconcilers"}
        and p.name != "config.py"
        and pattern.search(p.read_text())
    ]
    assert offenders == []


def test_client_lists_and_counts_with_filters_and_paging(store: Store) -> None:
    client = Client(store)
    ids = [client.start(Listed, {"n": n}) for n in range(5)]
    other = client.start(Other, {"n": 9})
    client.cancel(ids[0])

    assert client.count() == 6
    assert client.count(type_prefix="listing.a.") == 5
    assert client.count(status=Status.CANCELLED) == 1
    assert client.count(status=[Status.PENDING, Status.CANCELLED], type_prefix="listing.b") == 1

    everything = client.list(limit=100)
    assert {r.id for r in everything} == {*ids, other}
    pages = [client.list(limit=4, offset=0), client.list(limit=4, offset=4)]
    assert [len(p) for p in pages] == [4, 2]
    assert [r.id for p in pages for r in p] == [r.id for r in everything]  # no gap, no repeat
    # A plain string is taken too (Status is a StrEnum).
    assert [r.id for r in client.list(status="CANCELLED")] == [ids[0]]  # type: ignore[arg-type]
    assert client.list(limit=0) == []

    client.delete(ids[0])
    assert client.count() == 5
    assert client.count(include_deleted=True) == 6
    assert ids[0] in {r.id for r in client.list(include_deleted=True)}
    with pytest.raises(ValueError, match="offset"):
        client.list(offset=-1)
