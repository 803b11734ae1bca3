"""Instance ids are UUIDv7: time-ordered, so inserts land on the indexes' right-hand pages."""

from __future__ import annotations

import uuid
from pathlib import Path

from pydantic import BaseModel

from statemachine_wf import COMPLETED, Client, StepContext, Workflow, step
from statemachine_wf.definition.ids import new_instance_id
from statemachine_wf.stores.sqlite import SQLiteStore


class In(BaseModel):
    n: int = 0


class Out(BaseModel):
    done: bool | None = None


class Once(Workflow[In, Out]):
    workflow_type = "test.ids.v1"

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, Out]) -> str:
        return COMPLETED


def test_new_ids_are_v7_and_ascending() -> None:
    ids = [new_instance_id() for _ in range(2000)]  # many within one millisecond
    assert all(uuid.UUID(i).version == 7 for i in ids)
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)  # monotonic within the process, also within a millisecond


def test_client_start_and_start_many_use_v7(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "ids.db"))
    try:
        client = Client(store, [Once])
        one = client.start(Once, In(n=1))
        many = client.start_many(Once, [In(n=2), In(n=3)])
        assert uuid.UUID(one).version == 7
        assert all(uuid.UUID(i).version == 7 for i in many)
        assert [one, *many] == sorted([one, *many])
        given = str(uuid.uuid4())  # a caller's own id is kept as it is
        assert client.start(Once, In(n=4), instance_id=given) == given
    finally:
        store.close()
