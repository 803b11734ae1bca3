"""The store object's own contract (``ports.Lifecycle``), on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from statemachine_wf import open_store
from statemachine_wf.core.store import Store
from tests.integration.core.test_store_contract import new


def test_migrate_again_changes_nothing(store: Store) -> None:
    iid = new(store)
    version = store.migrate()  # the fixture migrated already
    assert version > 0
    assert store.migrate() == version
    assert [r.id for r in store.list_instances()] == [iid]
    assert len(store.events(iid)) == 1


def test_migrate_reports_each_migration_it_applies(store: Store, tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    store.migrate(on_migration=lambda done, pending: calls.append((done, pending)))
    assert calls == [(0, 0)]  # the fixture migrated it: nothing pending
    if store.dialect == "sqlite":  # a fresh file: every migration, in order
        fresh = open_store(f"sqlite:///{tmp_path / 'fresh.db'}")
        try:
            calls.clear()
            version = fresh.migrate(on_migration=lambda d, p: calls.append((d, p)))
        finally:
            fresh.close()
        assert calls == [(n, version) for n in range(version + 1)]


def test_the_dialect_names_the_database(
    store: Store, store_url: tuple[str, dict[str, str]]
) -> None:
    url, _options = store_url
    assert store.dialect == ("sqlite" if url.startswith("sqlite:") else "postgres")
