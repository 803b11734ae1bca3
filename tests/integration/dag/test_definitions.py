"""Saved definitions (immutable versions, delete refuses or cascades) and test runs."""

from __future__ import annotations

import time

import pytest

from statemachine_wf import InvalidState, NotFound, Status, Store
from statemachine_wf.dag import DagBuilder, DagClient, DagDefinition
from statemachine_wf.definition.events import Ev
from statemachine_wf.errors import DefinitionError

from . import helpers as h


def versioned(suffix: str) -> DagDefinition:
    b = DagBuilder("greeting")
    b.node("s", "start")
    h.py(b, "say", "tag", name=f"hello {suffix}")
    b.node("e", "end", outputs={"said": "{{ctx.say}}"})
    b.chain("s", "say", "e")
    return b.build()


def test_save_creates_immutable_versions(store: Store) -> None:
    client = DagClient(store)
    assert client.save(versioned("v1")) == 1
    assert client.save(versioned("v2").dump()) == 2
    assert client.definitions() == [("greeting", 2)]
    v1 = client.definition("greeting", 1)[1]
    assert v1 == versioned("v1")
    assert client.definition("greeting")[0] == 2
    with pytest.raises(NotFound):
        client.definition("greeting", 3)


def test_an_invalid_definition_is_not_saved(store: Store) -> None:
    client = DagClient(store)
    with pytest.raises(DefinitionError, match="no start node"):
        client.save({"name": "broken", "nodes": [{"id": "e", "type": "end"}]})
    assert client.definitions() == []


def test_a_running_instance_keeps_the_version_it_started_with(store: Store) -> None:
    client = DagClient(store)
    client.save(versioned("v1"))
    first = client.start("greeting")
    client.save(versioned("v2"))  # saved while the first instance is still queued
    second = client.start("greeting")
    pinned = client.start("greeting", version=1)
    with h.running(store):
        for iid in (first, second, pinned):
            client.wait(iid, timeout=20)
    assert client.output(first) == {"said": "hello v1"}
    assert client.output(second) == {"said": "hello v2"}
    assert client.output(pinned) == {"said": "hello v1"}
    created = client.history(first)[0]
    assert created.payload["ref"] == {"name": "greeting", "version": 1, "test": False}


def test_delete_refuses_while_instances_exist_then_cascades(store: Store) -> None:
    client = DagClient(store)
    client.save(versioned("v1"))
    client.save(versioned("v2"))
    iid = client.start("greeting")
    with pytest.raises(InvalidState, match="used by 1 instance"):
        client.delete("greeting")
    assert client.definitions() == [("greeting", 2)]
    assert client.delete("greeting", cascade=True) == 2
    assert client.definitions() == []
    assert store.get(iid) is None
    assert store.events(iid) == []
    assert store.task(iid, "s") is None


def test_idempotency_key_starts_once(store: Store) -> None:
    client = DagClient(store)
    client.save(versioned("v1"))
    a = client.start("greeting", idempotency_key="k-1")
    b = client.start("greeting", idempotency_key="k-1")
    assert a == b


def test_a_test_run_stores_its_definition_and_stops_in_one_transaction(store: Store) -> None:
    client = DagClient(store)
    raw = versioned("draft").dump()
    iid = client.test_run(raw, {"who": "editor"})
    created = client.history(iid)[0]
    assert created.event_type == Ev.CREATED
    assert created.payload["dag"] == raw
    assert created.payload["ref"]["test"] is True
    with h.running(store):
        assert client.wait(iid, timeout=20).status == Status.COMPLETED
    assert client.output(iid) == {"said": "hello draft"}
    client.stop_test_run(iid)
    assert store.get(iid) is None
    assert store.events(iid) == []
    with pytest.raises(NotFound):
        client.stop_test_run(iid)


def test_stop_test_run_refuses_a_saved_run(store: Store) -> None:
    client = DagClient(store)
    client.save(versioned("v1"))
    iid = client.start("greeting")
    with pytest.raises(NotFound, match="no test run"):
        client.stop_test_run(iid)
    assert store.get(iid) is not None


def timer_set(client: DagClient, iid: str) -> bool:
    return any(e.event_type == Ev.NODE_WAITING for e in client.history(iid))


def test_stopping_a_test_run_mid_flight_leaves_nothing(store: Store) -> None:
    client = DagClient(store)
    iid = client.test_run(h.delayed(30), {"seconds": 30})
    with h.running(store):
        client.wait(iid, timeout=10, statuses=[Status.RUNNING])
        deadline = time.monotonic() + 10
        while not timer_set(client, iid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert store.task(iid, "wait") is not None  # the timer (the delay node) is pending
        client.stop_test_run(iid)
    assert store.get(iid) is None
    assert store.task(iid, "wait") is None
    assert store.task(iid, "after") is None
