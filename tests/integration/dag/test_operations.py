"""Operating DAG instances: cancel, verify and rebuild (API and CLI), on both stores."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from statemachine_wf import Client, InvalidState, Status, Store
from statemachine_wf.cli import main
from statemachine_wf.core.fold import Projection
from statemachine_wf.dag import DagBuilder, DagClient, DagDefinition
from statemachine_wf.definition.events import Ev

from . import helpers as h


def _wait_for(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout} s")
        time.sleep(0.02)


def _cli(store_url: tuple[str, dict[str, str]], *args: str) -> list[str]:
    url, options = store_url
    schema = ["--schema", options["schema"]] if "schema" in options else []
    return ["--db", url, *schema, *args]


def cancellable(key: str) -> DagDefinition:
    """start -> wait (runs until cancelled) -> after -> end."""
    b = DagBuilder("cancellable")
    b.node("s", "start")
    h.py(b, "wait", "until_cancelled", key=key)
    h.py(b, "after", "tag", name="after", key=key)
    b.node("e", "end")
    b.chain("s", "wait", "after", "e")
    return b.build()


# -- cancel -----------------------------------------------------------------------------------


def test_cancel_before_any_runner(store: Store) -> None:
    client = DagClient(store)
    iid = client.start(h.linear(3), {"x": 1})
    record = client.cancel(iid)
    assert record.status == Status.CANCELLED
    assert store.task(iid, "s") is None  # the open task went in the same commit
    last = client.history(iid)[-1]
    assert (last.event_type, last.payload) == (Ev.CANCELLED, {"open": ["s"]})
    with h.running(store):
        pass  # a runner finds nothing to do
    assert client.executions(iid) == {}
    assert client.get(iid).status == Status.CANCELLED
    # Cancelling again is a no-op; Client routes DAG instances to the DAG cancel.
    assert Client(store).cancel(iid).status == Status.CANCELLED
    assert [e.event_type for e in client.history(iid)].count(Ev.CANCELLED) == 1


def test_a_finished_instance_cannot_be_cancelled(store: Store) -> None:
    client = DagClient(store)
    with h.running(store):
        iid = client.start(h.linear(1), {"x": 1})
        client.wait(iid, timeout=30)
    with pytest.raises(InvalidState, match="already COMPLETED"):
        client.cancel(iid)
    assert client.get(iid).status == Status.COMPLETED


def test_cancel_while_a_node_runs(store: Store) -> None:
    """The running function sees the cancel; its late result is a no-op; nothing after it
    is dispatched."""
    key = f"cancel-{store.dialect}-{time.monotonic_ns()}"
    client = DagClient(store)
    with h.running(store):
        iid = client.start(cancellable(key), {})
        _wait_for("wait node", lambda: h.calls[f"{key}:started"] == 1)
        assert client.cancel(iid).status == Status.CANCELLED
        _wait_for("cancel seen", lambda: h.calls[f"{key}:saw_cancel"] == 1)
    # The runner has stopped: the function returned and its completion was attempted.
    assert h.calls[f"{key}:timed_out"] == 0
    assert h.calls[f"{key}:after"] == 0
    hist = client.history(iid)
    assert not [e for e in hist if e.event_type == Ev.NODE_COMPLETED and e.node == "wait"]
    assert not [e for e in hist if e.node == "after"]
    assert hist[-1].event_type == Ev.CANCELLED
    assert store.task(iid, "wait") is None
    assert client.get(iid).status == Status.CANCELLED
    assert Client(store).verify(iid) == {}


def test_cancelling_a_parent_cancels_its_sub_workflow(store: Store) -> None:
    client = DagClient(store)
    with h.running(store):
        iid = client.start(h.sub_workflow(), h.child_input(1, until_cancelled=True))
        _wait_for("running child", lambda: [c.status for c in store.children(iid)] == ["RUNNING"])
        assert client.cancel(iid).status == Status.CANCELLED
        [child] = store.children(iid)
        record = Client(store).wait(child.id, timeout=30)
    assert record.status == Status.CANCELLED
    child_events = [e.event_type for e in store.events(child.id)]
    assert Ev.CANCEL_REQUESTED in child_events  # it was mid-step: asked, then stopped
    assert client.get(iid).status == Status.CANCELLED
    assert not [
        e for e in client.history(iid) if e.event_type == Ev.NODE_COMPLETED and e.node == "sub"
    ]


def test_cli_cancels_a_dag_instance(
    store: Store, store_url: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    client = DagClient(store)
    iid = client.start(h.linear(2), {"x": 1})
    assert main(_cli(store_url, "cancel", iid)) == 0
    assert f"{iid}  CANCELLED" in capsys.readouterr().out
    assert client.get(iid).status == Status.CANCELLED
    assert main(_cli(store_url, "resume", iid)) == 2  # not for DAGs: a clear error
    assert "DAG instance" in capsys.readouterr().err


# -- verify and rebuild -----------------------------------------------------------------------


@pytest.mark.parametrize("outcome", ["completed", "failed", "cancelled", "running"])
def test_verify_and_rebuild_fold_the_dag_log(store: Store, outcome: str) -> None:
    client = DagClient(store)
    ops = Client(store)
    if outcome == "completed":
        with h.running(store):
            iid = client.start(h.diamond("any"), {})
            client.wait(iid, timeout=30)
    elif outcome == "failed":
        with h.running(store):
            iid = client.start(h.error_fail(), {})
            client.wait(iid, timeout=30)
    elif outcome == "cancelled":
        iid = client.start(h.linear(1), {"x": 1})
        client.cancel(iid)
    else:
        iid = client.start(h.linear(1), {"x": 1})
    before = client.get(iid)
    assert before.status == Status(outcome.upper())
    assert ops.verify(iid) == {}

    store.rebuild(iid, Projection(status=Status.STALLED, progress={"output": "wrong"}))
    diff = ops.verify(iid)
    assert diff["status"] == ("STALLED", outcome.upper())
    assert diff["progress"] == ({"output": "wrong"}, before.progress)
    if outcome == "failed":
        assert diff["error"] == (None, before.error)

    projection = ops.rebuild(iid)
    assert projection.status == before.status
    assert ops.verify(iid) == {}
    after = client.get(iid)
    assert (after.status, after.progress, after.error) == (
        before.status,
        before.progress,
        before.error,
    )


def test_cli_verify_and_rebuild_a_dag_instance(
    store: Store, store_url: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    client = DagClient(store)
    with h.running(store):
        iid = client.start(h.linear(2), {"x": 1})
        client.wait(iid, timeout=30)
    assert main(_cli(store_url, "verify", iid)) == 0
    assert "verified 1 instance(s): 0 differ" in capsys.readouterr().out
    store.rebuild(iid, Projection(status=Status.RUNNING))
    assert main(_cli(store_url, "verify", iid)) == 1
    assert f"{iid}: row differs from its log" in capsys.readouterr().out
    assert main(_cli(store_url, "rebuild", iid)) == 0
    assert "rebuilt: COMPLETED" in capsys.readouterr().out
    assert client.output(iid) == {"result": 3}
    assert main(_cli(store_url, "verify", iid)) == 0
