"""``/instances/{id}/stream?after=`` must be a non-negative integer: anything else is a
400 that names the parameter, not a 500."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from statemachine_wf import Client, Runner
from statemachine_wf.dashboard.app import create_app
from statemachine_wf.stores.sqlite import SQLiteStore
from tests.unit.core.workflows import ThreeSteps


@pytest.mark.parametrize("after", ["abc", "-1", "1.5", "1e3", "²", " ", "9" * 5000])
def test_a_bad_after_is_a_400_naming_it(sqlite_store: SQLiteStore, after: str) -> None:
    instance_id = Client(sqlite_store, [ThreeSteps]).start(ThreeSteps, {"n": 1})
    with TestClient(create_app(sqlite_store), raise_server_exceptions=False) as web:
        r = web.get(f"/instances/{instance_id}/stream", params={"after": after})
    assert r.status_code == 400
    assert "after" in r.text
    assert "non-negative integer" in r.text


def test_a_good_after_streams_the_events_after_it(sqlite_store: SQLiteStore) -> None:
    client = Client(sqlite_store, [ThreeSteps])
    instance_id = client.start(ThreeSteps, {"n": 1})
    Runner(sqlite_store, [ThreeSteps]).run_until_idle(timeout=60)
    last = sqlite_store.events(instance_id)[-1].seq
    with TestClient(create_app(sqlite_store)) as web:
        for after, first in (("", 1), ("0", 1), (str(last - 1), last)):
            r = web.get(f"/instances/{instance_id}/stream", params={"after": after})
            assert r.status_code == 200
            assert f"id: {first}\n" in r.text
            assert f"id: {first - 1}\n" not in r.text
            assert "event: end" in r.text
