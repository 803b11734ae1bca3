"""The ``target`` fixture: one store (SQLite file or Postgres schema) and its ledger."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.plugins.stores import PG_DSN

from .harness import Target


def make_target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    if kind == "sqlite":
        return Target(
            kind="sqlite",
            url=f"sqlite:///{tmp_path / 'swf.db'}",
            schema=None,
            ledger_spec=f"sqlite:{tmp_path / 'ledger.db'}",
            log_dir=tmp_path,
        )
    schema = request.getfixturevalue("pg_schema")
    return Target(
        kind="postgres",
        url=PG_DSN,
        schema=schema,
        ledger_spec=f"postgres:{PG_DSN}|{schema}",
        log_dir=tmp_path,
    )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """Each store kind in turn, fresh for this test."""
    return make_target(request.param, tmp_path, request)


@pytest.fixture
def pg_target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    return make_target("postgres", tmp_path, request)


@pytest.fixture
def sqlite_target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    return make_target("sqlite", tmp_path, request)
