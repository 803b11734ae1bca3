"""The store object's own contract (``ports.Lifecycle``), on SQLite and PostgreSQL."""

from __future__ import annotations

from statemachine_wf.core.store import Store
from tests.integration.core.test_store_contract import new


def test_migrate_again_changes_nothing(store: Store) -> None:
    iid = new(store)
    version = store.migrate()  # the fixture migrated already
    assert version > 0
    assert store.migrate() == version
    assert [r.id for r in store.list_instances()] == [iid]
    assert len(store.events(iid)) == 1


def test_the_dialect_names_the_database(
    store: Store, store_url: tuple[str, dict[str, str]]
) -> None:
    url, _options = store_url
    assert store.dialect == ("sqlite" if url.startswith("sqlite:") else "postgres")
