"""Delay nodes as timers, internal errors retried, and the producer rules DagClient shares
with Client (payload limit, soft-deleted instances), on both stores with the real runner."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from statemachine_wf import Client, Status, Store
from statemachine_wf.dag import DagBuilder, DagClient, DagDefinition
from statemachine_wf.definition.events import Ev
from statemachine_wf.errors import NotFound, PayloadTooLarge
from statemachine_wf.runtime import dag_handlers
from statemachine_wf.runtime.dag_failures import INTERNAL_ATTEMPTS

from . import helpers as h

DELAY = 1.5


def delay_before_join() -> DagDefinition:
    """start -> {a python node taking 0.2 s, a delay of DELAY s} -> join (all) -> end."""
    b = DagBuilder("delay_join")
    b.node("s", "start")
    h.py(b, "slow", "pause", seconds=0.2)
    b.node("wait", "delay", seconds=DELAY)
    h.py(b, "join", "tag", name="joined")
    b.node("e", "end", outputs={"join": "{{ctx.join}}", "waited": "{{ctx.wait.seconds}}"})
    b.chain("s", "slow", "join", "e")
    b.chain("s", "wait", "join")
    return b.build()


def test_a_delay_in_front_of_an_all_join_holds_the_join_back(store: Store) -> None:
    """Regression: the join ran 0.47 s after the start, as if the 2 s delay was not there."""
    client, iid, record = h.run_to_end(store, delay_before_join())
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"join": "joined", "waited": DELAY}
    hist = client.history(iid)
    created = next(e for e in hist if e.event_type == Ev.CREATED)
    join_started = next(e for e in hist if e.event_type == Ev.NODE_STARTED and e.node == "join")
    wait_done = next(e for e in hist if e.event_type == Ev.NODE_COMPLETED and e.node == "wait")
    assert join_started.created_at >= created.created_at + DELAY
    assert wait_done.created_at >= created.created_at + DELAY  # it completes when due
    assert join_started.seq > wait_done.seq
    assert client.executions(iid) == {"s": 1, "slow": 1, "wait": 1, "join": 1, "e": 1}


def delay_only(seconds: float) -> DagDefinition:
    b = DagBuilder("delay_only")
    b.node("s", "start")
    b.node("wait", "delay", seconds=seconds)
    b.node("e", "end", outputs={"waited": "{{ctx.wait.seconds}}"})
    b.chain("s", "wait", "e")
    return b.build()


def test_a_delay_node_waits_without_a_thread_and_completes_when_due(store: Store) -> None:
    client = DagClient(store)
    with h.running(store):
        iid = client.start(delay_only(DELAY), {})
        record = client.wait(iid, timeout=30)
    assert record.status == Status.COMPLETED
    hist = client.history(iid)
    kinds = [(e.event_type, e.node) for e in hist if e.node == "wait"]
    # Dispatched, started, parked on its timer (lease released), started when due, done.
    assert kinds == [
        (Ev.NODE_DISPATCHED, "wait"),
        (Ev.NODE_STARTED, "wait"),
        (Ev.NODE_WAITING, "wait"),
        (Ev.NODE_STARTED, "wait"),
        (Ev.NODE_COMPLETED, "wait"),
    ]
    waiting = next(e for e in hist if e.event_type == Ev.NODE_WAITING)
    assert waiting.payload["timer"] == DELAY
    assert waiting.payload["until"] >= waiting.created_at + DELAY - 0.5


# -- an internal error of the runtime is retried, never FAILED ---------------------------------


def retried_condition() -> DagDefinition:
    b = DagBuilder("retried_condition")
    b.node("s", "start")
    b.node(
        "c",
        "condition",
        branches=[{"handle": "big", "when": "ctx.input.n > 100"}],
        retry=h.FAST_RETRY,
    )
    b.node("e", "end", join="any", outputs={"branch": "{{ctx.c.branch}}"})
    b.edge("s", "c")
    b.edge("c", "e", handle="big")
    b.edge("c", "e", handle="else")
    return b.build()


def flaky_evaluate(monkeypatch: pytest.MonkeyPatch, failures: int | None) -> list[int]:
    """Make the evaluator raise SystemError (as the 3.11 parser race did) ``failures``
    times (None: always)."""
    real = dag_handlers.evaluate  # type: ignore[attr-defined]  # its import, patched below
    calls: list[int] = []

    def evaluate(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if failures is None or len(calls) <= failures:
            raise SystemError("AST constructor recursion depth mismatch (before=4, after=3)")
        return real(*args, **kwargs)

    monkeypatch.setattr(dag_handlers, "evaluate", evaluate)
    return calls


def test_an_internal_error_in_a_condition_is_retried(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the runtime's SystemError failed the instance (not retryable)."""
    calls = flaky_evaluate(monkeypatch, failures=1)
    client = DagClient(store)
    with h.running(store):
        iid = client.start(retried_condition(), {"n": 500})
        record = client.wait(iid, timeout=30)
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"branch": "big"}
    assert len(calls) == 2
    retrying = [e for e in client.history(iid) if e.event_type == Ev.NODE_RETRYING]
    assert [e.node for e in retrying] == ["c"]
    assert retrying[0].error is not None
    assert retrying[0].error["internal"] is True
    assert "SystemError" in retrying[0].error["message"]


def test_a_lasting_internal_error_stalls_the_instance_instead_of_failing_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = flaky_evaluate(monkeypatch, failures=None)
    client = DagClient(store)
    with h.running(store):
        iid = client.start(retried_condition(), {"n": 500})
        record = client.wait(iid, timeout=30, statuses=[Status.STALLED, Status.FAILED])
    assert record.status == Status.STALLED
    assert len(calls) == INTERNAL_ATTEMPTS
    kinds = [e.event_type for e in client.history(iid)]
    assert Ev.NODE_FAILED not in kinds
    assert Ev.FAILED not in kinds


# -- the producer rules DagClient shares with Client -------------------------------------------


def test_dag_start_enforces_the_payload_limit(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: DagClient.start stored any input; Client.start refuses one over the limit."""
    monkeypatch.setenv("SWF_MAX_PAYLOAD_BYTES", "200")
    client = DagClient(store)
    big, big_test, small = (str(uuid.uuid4()) for _ in range(3))
    with pytest.raises(PayloadTooLarge, match="input") as info:
        client.start(h.linear(1), {"x": 1, "pad": "y" * 300}, instance_id=big)
    assert info.value.limit == 200
    assert store.get(big) is None  # nothing written
    with pytest.raises(PayloadTooLarge):
        client.test_run(h.linear(1), {"x": 1, "pad": "y" * 300}, instance_id=big_test)
    assert store.get(big_test) is None
    client.start(h.linear(1), {"x": 1}, instance_id=small)  # under the limit: fine
    assert store.get(small) is not None


def test_a_sub_workflow_child_input_over_the_limit_fails_the_node(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a child's input skipped the limit Client.start enforces."""
    client = DagClient(store)
    iid = client.start(h.sub_workflow(), h.child_input(n=2, run="r" * 300))
    monkeypatch.setenv("SWF_MAX_PAYLOAD_BYTES", "200")  # the runner checks the child's input
    with h.running(store):
        record = client.wait(iid, timeout=30)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error["code"] == "PayloadTooLarge"
    assert "sub-workflow dagtest.child.v1 input" in record.error["message"]
    assert store.children(iid) == []  # no child was created
    retrying = [e for e in client.history(iid) if e.event_type == Ev.NODE_RETRYING]
    assert retrying == []  # bad input: not retried


def test_dag_get_hides_a_soft_deleted_instance_like_client_get(store: Store) -> None:
    """Regression: DagClient.get showed soft-deleted instances that Client.get hides."""
    client = DagClient(store)
    with h.running(store):
        iid = client.start(h.linear(1), {"x": 1})
        client.wait(iid, timeout=30)
    Client(store).delete(iid)
    with pytest.raises(NotFound, match="deleted"):
        Client(store).get(iid)
    with pytest.raises(NotFound, match="deleted"):
        client.get(iid)
    with pytest.raises(NotFound, match="deleted"):
        client.history(iid)
    with pytest.raises(NotFound, match="deleted"):
        client.output(iid)
    assert client.get(iid, include_deleted=True).status == Status.COMPLETED
