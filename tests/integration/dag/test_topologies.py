"""The issue's topologies, each to its terminal state with the expected output, on both stores.

Each test runs a real runner (threads, leases, the store's task queue); the log is then
checked: every node that ran completed exactly once per run, and no node was dispatched
twice.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from statemachine_wf import Status, Store
from statemachine_wf.core.store import InstanceRecord
from statemachine_wf.dag import DagClient, DagDefinition
from statemachine_wf.definition.events import Ev

from . import helpers as h


def run(
    store: Store, definition: DagDefinition, data: dict[str, object], *, timeout: float = 30.0
) -> tuple[DagClient, str, InstanceRecord]:
    client = DagClient(store)
    with h.running(store):
        iid = client.start(definition, data)
        record = client.wait(iid, timeout=timeout)
    return client, iid, record


def dispatches(client: DagClient, iid: str) -> Counter[str]:
    return Counter(str(e.node) for e in client.history(iid) if e.event_type == Ev.NODE_DISPATCHED)


def assert_once(client: DagClient, iid: str) -> None:
    """Outside loops every node is dispatched and completed at most once."""
    assert max(dispatches(client, iid).values()) == 1
    assert max(client.executions(iid).values()) == 1


def test_linear(store: Store) -> None:
    client, iid, record = run(store, h.linear(3), {"x": 1})
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"result": 4}
    assert client.executions(iid) == {"s": 1, "n0": 1, "n1": 1, "n2": 1, "e": 1}
    assert_once(client, iid)


def test_fan_out(store: Store) -> None:
    client, iid, record = run(store, h.fan_out(5), {"x": 10})
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {f"b{i}": 10 + i for i in range(5)}
    assert_once(client, iid)


def test_fan_in(store: Store) -> None:
    client, iid, record = run(store, h.fan_in(4), {"x": 1})
    assert record.status == Status.COMPLETED
    # join = x0 + x1 = 2*(1+0) + 2*(1+1)
    assert client.output(iid) == {"sum": 6}
    assert client.executions(iid)["join"] == 1
    assert_once(client, iid)


def test_diamond_and(store: Store) -> None:
    client, iid, record = run(store, h.diamond("all"), {})
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"d": "d"}
    assert_once(client, iid)
    # The AND join ran after both branches.
    seq = {e.node: e.seq for e in client.history(iid) if e.event_type == Ev.NODE_COMPLETED}
    started = [
        e.seq for e in client.history(iid) if e.event_type == Ev.NODE_STARTED and e.node == "d"
    ]
    assert started[0] > max(seq["l"], seq["r"])


def test_diamond_or(store: Store) -> None:
    client, iid, record = run(store, h.diamond("any"), {})
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"d": "d"}
    assert_once(client, iid)  # the second branch to finish does not dispatch d again
    # Drained: both branches ran, and the instance completed only after every node did.
    assert client.executions(iid) == {"s": 1, "a": 1, "l": 1, "r": 1, "d": 1, "e": 1}
    hist = client.history(iid)
    done = next(e.seq for e in hist if e.event_type == Ev.COMPLETED)
    assert all(e.seq < done for e in hist if e.event_type == Ev.NODE_COMPLETED)


def test_deep_chain(store: Store) -> None:
    client, iid, record = run(store, h.deep_chain(100), {"x": 0}, timeout=120)
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"result": 100}
    assert len(client.executions(iid)) == 102
    assert_once(client, iid)


def test_error_path_continue(store: Store) -> None:
    client, iid, record = run(store, h.error_continue(), {})
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"handled": "card declined"}
    ctx = client.context(iid)
    assert ctx["a"]["error"]["code"] == "RuntimeError"
    assert "ok" not in client.executions(iid)  # the default handle was not followed
    assert_once(client, iid)


def test_error_path_fail_workflow(store: Store) -> None:
    client, iid, record = run(store, h.error_fail(), {})
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error["node"] == "a"
    assert "retries exhausted after 3 failures: always" in record.error["message"]
    types = [(e.event_type, e.node) for e in client.history(iid)]
    assert types.count((Ev.NODE_RETRYING, "a")) == 2
    assert types.count((Ev.NODE_FAILED, "a")) == 1
    assert types.count((Ev.NODE_STARTED, "a")) == 3
    assert store.task(iid, "a") is None  # a FAILED instance leaves no tasks


def test_retry_then_success(store: Store) -> None:
    key = f"flaky-{store.dialect}-{time.monotonic_ns()}"
    client, iid, record = run(store, h.flaky_chain(key, 2), {})
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"a": "ok after 3"}
    starts = [e.attempt for e in client.history(iid) if e.event_type == Ev.NODE_STARTED]
    assert starts == [1, 1, 2, 3, 1]  # s, a x3 (tries), e


@pytest.mark.parametrize(
    ("data", "size"),
    [
        ({"n": 500, "tags": []}, "big"),
        ({"n": 50, "tags": ["x"]}, "mid"),
        ({"n": 50, "tags": []}, "small"),
    ],
)
def test_conditional(store: Store, data: dict[str, object], size: str) -> None:
    client, iid, record = run(store, h.conditional(), data)
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"size": size}
    ran = client.executions(iid)
    assert {"big", "mid", "small"} & set(ran) == {size}


def timer_set(client: DagClient, iid: str) -> bool:
    return any(e.event_type == Ev.NODE_WAITING for e in client.history(iid))


def test_delay_is_a_durable_timer(store: Store) -> None:
    client = DagClient(store)
    iid = client.start(h.delayed(0.8), {"seconds": 0.8})
    with h.running(store):
        client.wait(iid, timeout=10, statuses=[Status.RUNNING])
        deadline = time.monotonic() + 10
        while not timer_set(client, iid) and time.monotonic() < deadline:
            time.sleep(0.02)
        # The delay node is the timer: its own task waits, nothing downstream exists yet.
        task = store.task(iid, "wait")
        assert task is not None
        assert not task.leased  # due later, nobody holds it, no thread sleeps on it
        assert store.task(iid, "after") is None
        record = client.wait(iid, timeout=10)
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"after": "after", "waited": 0.8}
    hist = client.history(iid)
    done = next(e for e in hist if e.event_type == Ev.NODE_WAITING and e.node == "wait")
    began = next(e for e in hist if e.event_type == Ev.NODE_STARTED and e.node == "after")
    assert began.created_at - done.created_at >= 0.75


def test_multi_level_join(store: Store) -> None:
    client, iid, record = run(store, h.multi_level_join(), {})
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"all": "abcd"}
    assert_once(client, iid)


def test_loop(store: Store) -> None:
    client, iid, record = run(store, h.loop(), {"items": [1, 2, 3]})
    assert record.status == Status.COMPLETED
    # body2 = 2*item + index
    assert client.output(iid) == {"results": [2, 5, 8], "n": 3}
    ran = client.executions(iid)
    assert ran["body"] == 3
    assert ran["body2"] == 3
    assert ran["each"] == 4  # three iterations and the final "done"
    assert ran["e"] == 1


def test_empty_loop_goes_straight_to_done(store: Store) -> None:
    client, iid, record = run(store, h.loop(), {"items": []})
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"results": [], "n": 0}
    assert "body" not in client.executions(iid)


def test_sub_workflow(store: Store) -> None:
    client, iid, record = run(store, h.sub_workflow(), h.child_input(3))
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"child": {"doubled": 6, "seen": 3}}
    [child] = store.children(iid)
    assert child.type == "dagtest.child.v1"
    assert child.status == Status.COMPLETED
    assert (child.parent_id, child.parent_node) == (iid, "sub")
    assert_once(client, iid)
