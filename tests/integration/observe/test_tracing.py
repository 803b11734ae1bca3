"""Traces (issue 13, item 4): a span per step attempt and per DAG node, children of the
trace that started the instance, in this process and in another one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, cast

from opentelemetry import trace
from opentelemetry.trace import SpanContext, StatusCode

from statemachine_wf import Client, Runner, Status, Store
from statemachine_wf.dag import DagClient

from ..dag import helpers as h
from .flows import Twice
from .tracing import EXPORTER

REPO = Path(__file__).resolve().parents[3]


class _Span(Protocol):
    """What these tests read of a finished span: the SDK's ``ReadableSpan``, whose
    ``attributes`` is typed ``Mapping | None`` though it is always a mapping."""

    @property
    def name(self) -> str: ...
    @property
    def attributes(self) -> Mapping[str, Any]: ...
    @property
    def context(self) -> SpanContext: ...
    @property
    def parent(self) -> SpanContext | None: ...
    @property
    def status(self) -> trace.Status: ...


def _step_spans() -> list[_Span]:
    spans = [s for s in EXPORTER.get_finished_spans() if s.name.startswith(("step ", "node "))]
    return cast("list[_Span]", spans)


def test_each_step_attempt_is_a_child_of_the_starters_span(store: Store) -> None:
    EXPORTER.clear()
    client = Client(store, [Twice])
    with trace.get_tracer("test").start_as_current_span("caller") as caller:
        iid = client.start(Twice, {})
    stored = client.get(iid).trace_context
    assert stored is not None
    assert "traceparent" in stored
    # The runner's threads start with an empty context: the link is the stored one.
    Runner(store, [Twice]).run_until_idle(timeout=30)
    assert client.get(iid).status == Status.COMPLETED

    spans = _step_spans()
    got = [
        (s.name, s.attributes["swf.step"], s.attributes["swf.attempt"], s.attributes["swf.outcome"])
        for s in spans
    ]
    assert got == [
        ("step first", "first", 1, "retried"),
        ("step first", "first", 2, "completed"),
        ("step second", "second", 1, "completed"),
    ]
    for s in spans:
        assert s.context.trace_id == caller.get_span_context().trace_id
        assert s.parent is not None
        assert s.parent.span_id == caller.get_span_context().span_id
        assert s.attributes["swf.instance_id"] == iid
        assert s.attributes["swf.type"] == Twice.spec().workflow_type
    assert spans[0].status.status_code == StatusCode.ERROR
    assert spans[1].status.status_code != StatusCode.ERROR


def test_start_many_stores_the_context_on_every_instance(store: Store) -> None:
    client = Client(store, [Twice])
    with trace.get_tracer("test").start_as_current_span("batch") as caller:
        ids = client.start_many(Twice, [{}, {"n": 1}, {"n": 2}])
    want = format(caller.get_span_context().trace_id, "032x")
    for iid in ids:
        stored = client.get(iid).trace_context
        assert stored is not None
        assert want in json.loads(stored)["traceparent"]


def test_an_instance_started_outside_a_trace_gets_its_own(store: Store) -> None:
    EXPORTER.clear()
    client = Client(store, [Twice])
    iid = client.start(Twice, {})
    assert client.get(iid).trace_context is None
    Runner(store, [Twice]).run_until_idle(timeout=30)
    spans = _step_spans()
    assert len(spans) == 3
    assert all(s.parent is None for s in spans)  # each attempt a root: nothing to continue


def test_each_dag_node_is_a_span_of_the_starters_trace(store: Store) -> None:
    EXPORTER.clear()
    client = DagClient(store)
    with trace.get_tracer("test").start_as_current_span("caller") as caller:
        iid = client.start(h.linear(2), {"x": 1})
    with h.running(store):
        assert client.wait(iid, timeout=30).status == Status.COMPLETED
    spans = [s for s in _step_spans() if s.attributes["swf.instance_id"] == iid]
    nodes = sorted(s.attributes["swf.step"] for s in spans)
    assert nodes == ["e", "n0", "n1", "s"]
    for s in spans:
        assert s.name == f"node {s.attributes['swf.step']}"
        assert s.context.trace_id == caller.get_span_context().trace_id
        assert s.attributes["swf.type"] == "swf.dag"
        assert s.attributes["swf.attempt"] == 1
    assert {s.attributes["swf.outcome"] for s in spans if s.attributes["swf.step"] != "e"} == {
        "completed"
    }


def test_a_worker_in_another_process_continues_the_trace(
    store: Store, store_url: tuple[str, dict[str, str]]
) -> None:
    client = Client(store, [Twice])
    with trace.get_tracer("test").start_as_current_span("caller") as caller:
        iid = client.start(Twice, {})
    url, options = store_url
    cmd = [sys.executable, "-m", "tests.integration.observe.trace_worker", url]
    if "schema" in options:
        cmd.append(options["schema"])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr
    assert client.get(iid).status == Status.COMPLETED
    spans = [s for s in json.loads(done.stdout) if s["name"].startswith("step ")]
    assert [s["attributes"]["swf.step"] for s in spans] == ["first", "first", "second"]
    for s in spans:
        assert s["trace_id"] == caller.get_span_context().trace_id
        assert s["parent"] == caller.get_span_context().span_id
        assert s["attributes"]["swf.instance_id"] == iid
