"""What a DAG start checks once, and what it checks every time.

A start reuses the checks of a definition the same to the letter as the last one of its
name (a hundred-node graph's checks cost a millisecond), and reads the type registry
only until the type is registered as a DAG type (a name is one kind for good).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from statemachine_wf import Store
from statemachine_wf.client import dag as dag_client
from statemachine_wf.dag import DagBuilder, DagClient, DagDefinition
from statemachine_wf.definition import dag_models
from statemachine_wf.definition.dag_models import Graph

from . import helpers as h


def greeting(text: str, type_: str = "swf.dag") -> DagDefinition:
    b = DagBuilder("greeting")
    b.node("s", "start")
    h.py(b, "say", "tag", name=text)
    b.node("e", "end", outputs={"said": "{{ctx.say}}"})
    b.chain("s", "say", "e")
    return b.build().model_copy(update={"type": type_})


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the definitions the client checked, in order."""
    seen: list[str] = []
    check, load_graph = dag_models.check, dag_models.load_graph

    def counted_check(definition: DagDefinition) -> Graph:
        seen.append(definition.name)
        return check(definition)

    def counted_load(data: Any) -> tuple[DagDefinition, Graph]:
        checked, graph = load_graph(data)
        seen.append(checked.name)
        return checked, graph

    monkeypatch.setattr(dag_client, "check", counted_check)
    monkeypatch.setattr(dag_client, "load_graph", counted_load)
    return seen


@pytest.fixture
def reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kinds the store's type registry was read for, in order."""
    seen: list[str] = []
    registered = store.registered_types

    def counted(kind: Any = "machine") -> list[str]:
        seen.append(kind)
        return registered(kind)

    monkeypatch.setattr(store, "registered_types", counted)
    return seen


def created_dag(client: DagClient, iid: str) -> dict[str, Any]:
    payload: dict[str, Any] = client.history(iid)[0].payload
    return payload["dag"]  # type: ignore[no-any-return]


def test_a_saved_definition_is_checked_once_until_its_content_changes(
    store: Store, checks: list[str]
) -> None:
    client = DagClient(store)
    client.save(greeting("one"))
    checks.clear()  # the save's own check
    first = [client.start("greeting") for _ in range(3)]
    assert checks == ["greeting"]
    client.delete("greeting", cascade=True)  # its versions and instances: numbers restart
    client.save(greeting("two"))
    checks.clear()
    second = client.start("greeting")
    assert checks == ["greeting"]  # the same name and version, another content
    assert created_dag(client, second) == greeting("two").dump()
    assert all(store.get(i) is None for i in first)


def test_a_definition_object_is_checked_once_until_another_is_given(
    store: Store, checks: list[str]
) -> None:
    client = DagClient(store)
    ids = [client.start(greeting("one")) for _ in range(3)]
    assert checks == ["greeting"]
    other = client.start(greeting("two"))
    assert checks == ["greeting", "greeting"]
    assert [created_dag(client, i)["nodes"][1]["config"]["args"] for i in (*ids, other)] == [
        {"name": "one"}
    ] * 3 + [{"name": "two"}]
    client.start(greeting("two"))
    assert len(checks) == 2


def test_a_registered_dag_type_is_read_from_the_registry_once(
    store: Store, reads: list[str]
) -> None:
    store.register_types(["swf.dag"], by="test", kind="dag")
    client = DagClient(store)
    for _ in range(3):
        client.start(greeting("one"))
    assert reads == ["machine", "dag"]  # the first start only


def test_an_unregistered_type_warns_once_and_is_read_until_registered(
    store: Store, reads: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    client = DagClient(store)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            client.start(greeting("one", type_="t.later"))
    warned = [r for r in caplog.records if "no runner has registered the DAG type" in r.message]
    assert len(warned) == 1
    assert reads == ["machine", "dag"] * 3
    store.register_types(["t.later"], by="test", kind="dag")
    reads.clear()
    client.start(greeting("one", type_="t.later"))
    client.start(greeting("one", type_="t.later"))
    assert reads == ["machine", "dag"]


def test_a_checked_definition_is_dumped_once_for_the_starts_that_reuse_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    dumped: list[str] = []
    dump = DagDefinition.dump

    def counted(self: DagDefinition) -> dict[str, Any]:
        dumped.append(self.name)
        return dump(self)

    client = DagClient(store)
    client.save(greeting("one"))
    one, two = greeting("one"), greeting("two")  # built (and measured) before counting
    monkeypatch.setattr(DagDefinition, "dump", counted)
    by_name = [client.start("greeting") for _ in range(3)]
    assert dumped == ["greeting"]  # the saved JSON is the key: dumped once, when checked
    dumped.clear()
    same = [client.start(one) for _ in range(2)]
    assert len(dumped) == 2  # its key only: the same content as the saved one, checked
    dumped.clear()
    other = [client.start(two) for _ in range(3)]
    # Each start dumps the object it is given (its key); the first's check measures it
    # and keeps its dump: twice more.
    assert len(dumped) == 3 + 2
    for ids, definition in ((by_name + same, one), (other, two)):
        expected = dump(definition)
        assert all(created_dag(client, i) == expected for i in ids)
