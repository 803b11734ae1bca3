"""SQLite driver errors inside a write are the database's: StoreError, never quarantine."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from statemachine_wf import COMPLETED, Client, Runner, Status, StepContext, Workflow, step
from statemachine_wf.core import decide
from statemachine_wf.core.store import Commit
from statemachine_wf.definition.events import Ev
from statemachine_wf.errors import StoreError
from statemachine_wf.stores.sqlite import SQLiteStore


class In(BaseModel):
    pass


class Pr(BaseModel):
    pass


class Once(Workflow[In, Pr]):
    workflow_type = "t.sqlite_errors.v1"

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, Pr]) -> None:
        return None


class FlakyWrites(SQLiteStore):
    """The real store; its first ``failures`` commits of a STEP_COMPLETED meet a real
    driver error inside the write transaction (a statement the driver refuses)."""

    failures = 1

    def _run_decision(
        self, conn: sqlite3.Connection, names: Sequence[str], params: dict[str, Any]
    ) -> sqlite3.Row | dict[str, int] | None:
        if self.failures and Ev.STEP_COMPLETED in params["events"]:  # the events' JSON
            self.failures -= 1
            conn.execute("SELECT swf_no_such_function()")  # sqlite3.OperationalError
        return super()._run_decision(conn, names, params)


def test_a_driver_error_inside_a_write_is_a_store_error(tmp_path: Path) -> None:
    store = FlakyWrites(str(tmp_path / "swf.db"))
    store.migrate()
    try:
        client = Client(store, [Once])
        instance_id = client.start(Once, In())
        claim = store.claim(worker="w", types=["t.sqlite_errors.v1"], limit=1, lease=30.0)[0]
        record = client.get(instance_id)
        state = record.projection(in_flight=True)
        decision = decide.success(Once.spec(), state, "only", 1, None, {})
        with pytest.raises(StoreError, match="OperationalError"):
            store.apply(Commit(instance_id, claim.instance.version, decision, "w", 30.0))
        # Nothing of the failed transaction stayed, and the connection is usable again.
        assert client.get(instance_id).version == claim.instance.version
        store.apply(Commit(instance_id, claim.instance.version, decision, "w", 30.0))
        assert client.status(instance_id) == Status.COMPLETED
    finally:
        store.close()


def test_the_runner_retries_rather_than_quarantines(tmp_path: Path) -> None:
    store = FlakyWrites(str(tmp_path / "swf.db"))
    store.migrate()
    try:
        client = Client(store, [Once])
        instance_id = client.start(Once, In())
        Runner(store, [Once]).run_until_idle(timeout=20)
        assert store.failures == 0  # the failure really was injected
        assert client.status(instance_id) == Status.COMPLETED
        kinds = [e.event_type for e in client.history(instance_id)]
        assert Ev.QUARANTINED not in kinds
        assert kinds.count(Ev.STEP_STARTED) == 2  # handed back, claimed again, ran again
        assert client.verify(instance_id) == {}
    finally:
        store.close()
