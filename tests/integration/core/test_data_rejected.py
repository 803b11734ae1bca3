"""A value the database cannot store fails that instance once; it never loops.

PostgreSQL refuses a NUL in text (``\\u0000`` in jsonb); SQLite is made to refuse it too
(one check both stores share). The step runs once: ``ctx.set`` fails it naming the field;
a value that gets past the API is quarantined with a dead letter that names the reason.
"""

from __future__ import annotations

import threading

import pytest
from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    Fail,
    RetryPolicy,
    Runner,
    Snooze,
    Status,
    StepContext,
    Store,
    Workflow,
    step,
)
from statemachine_wf.definition.events import Ev
from statemachine_wf.errors import DataRejected, StoreError


class In(BaseModel):
    pass


class Pr(BaseModel):
    note: str | None = None


class Poison(Workflow[In, Pr]):
    workflow_type = "t.data_rejected.v1"
    runs: list[int]
    guard: threading.Lock

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, Pr]) -> None:
        with self.guard:
            self.runs.append(ctx.attempt)
        ctx.set(note="a\x00b")


def test_a_value_the_database_refuses_never_loops(store: Store) -> None:
    # Both stores refuse it the same way (issue 9, item 1): ctx.set names the field, the
    # step fails once; nothing loops, and SQLite no longer stores what PostgreSQL refuses.
    client = Client(store, [Poison])
    i = client.start(Poison, In())
    runs: list[int] = []
    Runner(store, [Poison], dependencies={"runs": runs, "guard": threading.Lock()}).run_until_idle(
        timeout=10
    )
    assert runs == [1]
    record = client.get(i)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert "progress.note contains a NUL character" in record.error["message"]


class PoisonMessage(Workflow[In, Pr]):
    workflow_type = "t.data_rejected.message.v1"
    runs: list[int]
    guard: threading.Lock

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, Pr]) -> None:
        with self.guard:
            self.runs.append(ctx.attempt)
        raise Fail("bad\x00message")


def test_a_refused_value_past_the_api_is_quarantined_once_on_both_stores(store: Store) -> None:
    # A NUL in an exception message reaches the store's shared check: DataRejected on
    # both stores, the instance quarantined with a dead letter, the step run once.
    client = Client(store, [PoisonMessage])
    i = client.start(PoisonMessage, In())
    runs: list[int] = []
    Runner(
        store, [PoisonMessage], dependencies={"runs": runs, "guard": threading.Lock()}
    ).run_until_idle(timeout=10)
    assert runs == [1]
    record = client.get(i)
    assert record.status == Status.STALLED
    assert record.error is not None
    assert record.error["code"] == "quarantined"
    assert [e.event_type for e in client.history(i)][-1] == Ev.QUARANTINED
    (letter,) = [d for d in client.dead_letters() if d["instance_id"] == i]
    assert "refused the instance's data" in letter["reason"]
    assert "NUL" in letter["reason"]


def test_data_rejected_is_a_store_error_apart_from_the_database_being_away(store: Store) -> None:
    assert issubclass(DataRejected, StoreError)
    # Both stores now: PostgreSQL refuses NUL in text, and SQLite refuses it too.
    client = Client(store, [Poison])
    i = client.start(Poison, In())
    with pytest.raises(DataRejected):
        store.quarantine(i, reason="bad\x00reason", worker="w")


class Forever(Workflow[In, Pr]):
    workflow_type = "t.data_rejected.forever.v1"
    retry_policy = RetryPolicy(max_attempts=2, initial_delay=0.01, jitter=False)
    runs: list[int]
    guard: threading.Lock

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, Pr]) -> None:
        with self.guard:
            self.runs.append(ctx.attempt)
        raise Snooze(1e300, "see you never")


def test_an_unstorable_duration_fails_the_step_alike_on_both_stores(store: Store) -> None:
    client = Client(store, [Forever])
    i = client.start(Forever, In())
    runs: list[int] = []
    deps = {"runs": runs, "guard": threading.Lock()}
    Runner(store, [Forever], dependencies=deps).run_until_idle(timeout=10)
    assert runs == [1, 2]  # a failure each (ValueError), then the policy stalls it
    record = client.get(i)
    assert record.status == Status.STALLED
    assert record.error is not None
    assert "seconds must be a finite number" in record.error["message"]
