"""A dashboard whose database has stopped answers 503 with a message saying the store is
unavailable, on every page and action, never "no instance" (404) nor "refused" (409); and
once the database is back the same app serves the pages again. A real PostgreSQL cluster
that the test stops, not a stand-in for the store."""

from __future__ import annotations

from starlette.testclient import TestClient

from statemachine_wf import Client
from statemachine_wf.dashboard.app import create_app
from statemachine_wf.stores.postgres import PostgresStore
from tests.plugins.throwaway_pg import Cluster
from tests.unit.core.workflows import ThreeSteps

TOKEN = "s3cret-operator-token"


def test_an_outage_is_a_503_not_a_missing_instance(throwaway_pg: Cluster) -> None:
    store = PostgresStore(throwaway_pg.dsn, pool_timeout=1, listen=False)
    try:
        store.migrate()
        instance_id = Client(store, [ThreeSteps]).start(ThreeSteps, {"n": 1})
        with TestClient(create_app(store, operator_token=TOKEN)) as web:
            assert web.get(f"/instances/{instance_id}").status_code == 200
            throwaway_pg.stop()
            page = web.get(f"/instances/{instance_id}")
            assert page.status_code == 503
            assert "store is unavailable" in page.text
            assert "no instance" not in page.text
            assert str(throwaway_pg.port) not in page.text  # nothing of the connection
            assert page.headers["retry-after"]
            for path in ("/", "/instances", "/dead-letters", "/workers"):
                assert web.get(path).status_code == 503, path
            action = web.post(
                f"/instances/{instance_id}/cancel", headers={"x-operator-token": TOKEN}
            )
            assert action.status_code == 503
            assert "refused" not in action.text
            # A live stream just ends (the browser reconnects): not "gone", which the
            # page shows as an ended instance.
            stream = web.get(f"/instances/{instance_id}/stream")
            assert stream.status_code == 200
            assert "event: gone" not in stream.text
            throwaway_pg.start()
            assert web.get(f"/instances/{instance_id}").status_code == 200
    finally:
        store.close()
