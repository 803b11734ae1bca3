"""Runner behaviour on both stores: retries, stalls, failures, cancel, reconcile, versions."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    Fail,
    InputError,
    InvalidState,
    ReconcileContext,
    Reconciliation,
    RetryPolicy,
    Runner,
    RunnerOptions,
    Stall,
    Status,
    StepContext,
    Store,
    UnknownWorkflowType,
    Workflow,
    reconcile,
    step,
)
from statemachine_wf.definition.workflow import ErrorMap

FAST = RetryPolicy(initial_delay=0.01, max_delay=0.05, jitter=False, max_attempts=3)


class In(BaseModel):
    n: int = 0
    mode: str = "ok"


class Pr(BaseModel):
    ref: str | None = None
    done: bool | None = None
    value: int | None = None


Ctx = StepContext[In, Pr]


class Flaky(Workflow[In, Pr]):
    """Fails in the way its input says, a number of times."""

    workflow_type = "t.flaky.v1"
    retry_policy = FAST
    errors: ClassVar[ErrorMap] = {KeyError: Fail}
    calls: dict[str, int]

    @step(initial=True, to=["finish", "finish_alt"])
    def act(self, ctx: Ctx) -> str:
        key = f"{ctx.instance_id}:{ctx.step}"
        self.calls[key] = self.calls.get(key, 0) + 1
        mode, n = ctx.input.mode, ctx.input.n
        if mode == "retry" and self.calls[key] <= n:
            raise TimeoutError("transient")
        if mode == "stall":
            raise Stall("waiting for funds", retry_in=3600)
        if mode == "fail":
            raise Fail("permanently bad", code="bad_thing")
        if mode == "mapped":
            raise KeyError("mapped to Fail")
        if mode == "undeclared":
            return "nowhere"
        if mode == "conflict":
            ctx.save(value=1)
            ctx.set(value=2)
        if mode == "retry_forever":
            raise TimeoutError("always")
        return "finish"

    @step(to=COMPLETED)
    def finish(self, ctx: Ctx) -> None:
        ctx.set(done=True)

    @step(to=COMPLETED)
    def finish_alt(self, ctx: Ctx) -> None: ...


def run(
    store: Store, classes: list[type[Workflow[Any, Any]]], deps: dict[str, Any], **opts: Any
) -> None:
    Runner(
        store, classes, options=RunnerOptions(concurrency=4, **opts), dependencies=deps
    ).run_until_idle(timeout=30)


def test_happy_path_and_history(store: Store) -> None:
    client = Client(store, [Flaky])
    calls: dict[str, int] = {}
    i = client.start(Flaky, In())
    run(store, [Flaky], {"calls": calls})
    rec = client.get(i)
    assert rec.status == Status.COMPLETED
    assert rec.progress == {"done": True}
    types = [e.event_type for e in client.history(i)]
    assert types == [
        "WORKFLOW_CREATED",
        "STEP_STARTED",
        "STEP_COMPLETED",
        "STEP_STARTED",
        "STEP_COMPLETED",
        "WORKFLOW_COMPLETED",
    ]
    assert client.verify(i) == {}


def test_retry_with_backoff_then_success(store: Store) -> None:
    client = Client(store, [Flaky])
    calls: dict[str, int] = {}
    i = client.start(Flaky, In(mode="retry", n=2))
    run(store, [Flaky], {"calls": calls})
    rec = client.get(i)
    assert rec.status == Status.COMPLETED
    failed = [e for e in client.history(i) if e.event_type == "STEP_FAILED"]
    assert [e.attempt for e in failed] == [1, 2]
    assert all(e.payload["outcome"] == "retry" for e in failed)
    assert calls[f"{i}:act"] == 3
    assert client.verify(i) == {}


def test_retries_exhausted_stall_then_manual_resume(store: Store) -> None:
    client = Client(store, [Flaky])
    calls: dict[str, int] = {}
    i = client.start(Flaky, In(mode="retry_forever"))
    run(store, [Flaky], {"calls": calls})
    rec = client.get(i)
    assert rec.status == Status.STALLED
    assert rec.error is not None
    assert "retries exhausted after 3" in rec.error["message"]
    assert calls[f"{i}:act"] == 3
    with pytest.raises(InvalidState):
        client.retry(i)  # only FAILED can be retried
    assert client.resume(i).status == Status.RUNNING
    assert client.verify(i) == {}


def test_stall_fail_and_mapped_errors(store: Store) -> None:
    client = Client(store, [Flaky])
    calls: dict[str, int] = {}
    stalled = client.start(Flaky, In(mode="stall"))
    failed = client.start(Flaky, In(mode="fail"))
    mapped = client.start(Flaky, In(mode="mapped"))
    run(store, [Flaky], {"calls": calls})
    s = client.get(stalled)
    assert s.status == Status.STALLED
    assert s.error is not None
    assert s.error["code"] == "stalled"
    assert s.error["recoverable"]
    task = store.task(stalled)
    assert task is not None
    assert task.due_at > time.time() + 3000
    f = client.get(failed)
    assert f.status == Status.FAILED
    assert f.error is not None
    assert (f.error["code"], f.error["recoverable"]) == ("bad_thing", False)
    assert store.task(failed) is None
    m = client.get(mapped)
    assert m.status == Status.FAILED
    assert m.error is not None
    assert m.error["code"] == "KeyError"
    for i in (stalled, failed, mapped):
        assert client.verify(i) == {}


def test_manual_retry_of_failed(store: Store) -> None:
    client = Client(store, [Flaky])
    calls: dict[str, int] = {}
    i = client.start(Flaky, In(mode="fail"))
    run(store, [Flaky], {"calls": calls})
    assert client.status(i) == Status.FAILED
    client.retry(i)
    run(store, [Flaky], {"calls": calls})
    assert client.status(i) == Status.FAILED  # same input, same failure, attempt 2
    attempts = [e.attempt for e in client.history(i) if e.event_type == "STEP_STARTED"]
    assert attempts == [1, 2]
    assert client.verify(i) == {}


def test_undeclared_transition_and_progress_conflict_fail_with_codes(store: Store) -> None:
    client = Client(store, [Flaky])
    calls: dict[str, int] = {}
    bad = client.start(Flaky, In(mode="undeclared"))
    conflict = client.start(Flaky, In(mode="conflict"))
    run(store, [Flaky], {"calls": calls})
    b = client.get(bad)
    assert b.status == Status.FAILED
    assert b.error is not None
    assert b.error["code"] == "undeclared_transition"
    c = client.get(conflict)
    assert c.status == Status.FAILED
    assert c.error is not None
    assert "already set to 1" in c.error["message"]
    assert c.progress == {"value": 1}  # the saved value stands, the conflicting one is gone


def test_bad_input_writes_nothing(store: Store) -> None:
    client = Client(store, [Flaky])
    with pytest.raises(InputError, match="n"):  # was pydantic's ValidationError (defect 9)
        client.start(Flaky, {"n": "not a number"})
    with pytest.raises(UnknownWorkflowType, match=r"nope\.v1"):
        client.start("nope.v1", {})
    assert store.list_instances() == []


def test_cancel_pending_at_once_and_running_at_the_boundary(store: Store) -> None:
    started = threading.Event()
    release = threading.Event()

    class Slow(Workflow[In, Pr]):
        workflow_type = "t.slow.v1"

        @step(initial=True, to="after")
        def wait(self, ctx: Ctx) -> None:
            started.set()
            assert release.wait(10)
            assert ctx.cancel_requested

        @step(to=COMPLETED)
        def after(self, ctx: Ctx) -> None:
            raise AssertionError("must not run after a cancel")

    client = Client(store, [Slow])
    pending = client.start(Slow, In(), delay=60)
    assert client.cancel(pending).status == Status.CANCELLED
    running = client.start(Slow, In())
    runner = Runner(store, [Slow], options=RunnerOptions(concurrency=2))
    runner.start()
    try:
        assert started.wait(10)
        rec = client.cancel(running)
        assert rec.status == Status.RUNNING
        assert rec.cancel_requested
        release.set()
        final = client.wait(running, timeout=10)
    finally:
        runner.stop()
    assert final.status == Status.CANCELLED
    kinds = [e.event_type for e in client.history(running)]
    assert kinds[-3:] == ["CANCEL_REQUESTED", "STEP_COMPLETED", "WORKFLOW_CANCELLED"]
    assert client.verify(running) == {}
    with pytest.raises(InvalidState):
        client.cancel(running)


class Recon(Workflow[In, Pr]):
    workflow_type = "t.recon.v1"
    outside: dict[str, str]
    effects: list[str]

    @step(initial=True, to="confirm")
    def submit(self, ctx: Ctx) -> None:
        ref = f"ref-{ctx.instance_id}"
        ctx.save(ref=ref)
        self.effects.append(ref)
        self.outside[ref] = "done"

    @step(to=COMPLETED)
    def confirm(self, ctx: Ctx) -> None:
        ctx.set(done=True)

    @reconcile
    def check(self, ctx: ReconcileContext[In, Pr]) -> Reconciliation:
        if ctx.step == "submit" and ctx.progress.ref and ctx.progress.ref in self.outside:
            return ctx.goto("confirm", found=ctx.progress.ref)
        return ctx.unchanged()


def _crash_in_flight(
    store: Store, i: str, *, after_effect: bool, outside: dict[str, str], effects: list[str]
) -> None:
    """Leave `submit` in flight as a SIGKILL would: intent and saved ref, no completion."""
    from statemachine_wf.core import decide
    from statemachine_wf.core.store import Commit

    [claim] = store.claim(worker="dead", types=["t.recon.v1"], lease=0.05)
    ref = f"ref-{i}"
    d = decide.saved(claim.instance.projection(in_flight=True), "submit", 1, {"ref": ref})
    store.apply(Commit(i, claim.instance.version, d, "dead"))
    if after_effect:
        outside[ref] = "done"
        effects.append(ref)
    time.sleep(0.1)  # the dead runner's lease expires


@pytest.mark.parametrize("after_effect", [True, False])
def test_in_doubt_step_is_reconciled_before_it_runs_again(store: Store, after_effect: bool) -> None:
    client = Client(store, [Recon])
    outside: dict[str, str] = {}
    effects: list[str] = []
    i = client.start(Recon, In())
    _crash_in_flight(store, i, after_effect=after_effect, outside=outside, effects=effects)
    run(store, [Recon], {"outside": outside, "effects": effects})
    rec = client.get(i)
    assert rec.status == Status.COMPLETED
    assert effects == [f"ref-{i}"]  # the side effect happened exactly once either way
    reconciled = [e for e in client.history(i) if e.event_type == "RECONCILED"]
    assert len(reconciled) == 1
    assert reconciled[0].payload["decision"] == ("goto" if after_effect else "unchanged")
    assert reconciled[0].payload["in_doubt"] is True
    assert client.verify(i) == {}


def test_in_doubt_without_hook_runs_again_with_next_attempt(store: Store) -> None:
    client = Client(store, [Flaky])
    calls: dict[str, int] = {}
    i = client.start(Flaky, In())
    store.claim(worker="dead", types=["t.flaky.v1"], lease=0.05)
    time.sleep(0.1)
    run(store, [Flaky], {"calls": calls})
    assert client.status(i) == Status.COMPLETED
    starts = [(e.node, e.attempt) for e in client.history(i) if e.event_type == "STEP_STARTED"]
    assert starts == [("act", 1), ("act", 2), ("finish", 1)]


def test_async_and_blocking_actions_do_not_stall_each_other(store: Store) -> None:
    gate = threading.Event()

    class Blocking(Workflow[In, Pr]):
        workflow_type = "t.blocking.v1"

        @step(initial=True, to=COMPLETED)
        def block(self, ctx: Ctx) -> None:
            assert gate.wait(10)

    class Quick(Workflow[In, Pr]):
        workflow_type = "t.quick.v1"

        @step(initial=True, to=COMPLETED)
        async def go(self, ctx: Ctx) -> None:
            import asyncio

            await asyncio.sleep(0.001)

    client = Client(store, [Blocking, Quick])
    b = client.start(Blocking, In())
    quick = [client.start(Quick, In()) for _ in range(20)]
    runner = Runner(store, [Blocking, Quick], options=RunnerOptions(concurrency=3))
    runner.start()
    try:
        for q in quick:  # all finish while the blocking action still holds its thread
            assert client.wait(q, timeout=10).status == Status.COMPLETED
        assert client.status(b) == Status.RUNNING
        gate.set()
        assert client.wait(b, timeout=10).status == Status.COMPLETED
    finally:
        gate.set()
        runner.stop()


def test_versions_coexist_and_unhosted_types_are_left_alone(store: Store) -> None:
    class V1(Workflow[In, Pr]):
        workflow_type = "t.versioned.v1"

        @step(initial=True, to=COMPLETED)
        def old(self, ctx: Ctx) -> None:
            ctx.set(value=1)

    class V2(Workflow[In, Pr]):
        workflow_type = "t.versioned.v2"

        @step(initial=True, to=COMPLETED)
        def new(self, ctx: Ctx) -> None:
            ctx.set(value=2)

    client = Client(store, [V1, V2])
    a = client.start(V1, In())
    b = client.start(V2, In())
    run(store, [V2], {})  # a runner that hosts only v2
    assert client.status(a) == Status.PENDING  # untouched, waiting for a v1 runner
    assert client.get(b).progress == {"value": 2}
    run(store, [V1, V2], {})
    assert client.get(a).progress == {"value": 1}


def test_prefix_routing(store: Store) -> None:
    class Bill(Workflow[In, Pr]):
        workflow_type = "billing.invoice.v1"

        @step(initial=True, to=COMPLETED)
        def go(self, ctx: Ctx) -> None: ...

    class Note(Workflow[In, Pr]):
        workflow_type = "notify.email.v1"

        @step(initial=True, to=COMPLETED)
        def go(self, ctx: Ctx) -> None: ...

    client = Client(store, [Bill, Note])
    b, n = client.start(Bill, In()), client.start(Note, In())
    run(store, [Bill, Note], {}, prefixes=("billing.%",))
    assert (client.status(b), client.status(n)) == (Status.COMPLETED, Status.PENDING)


def test_invalid_stored_input_is_dead_lettered_and_failed(store: Store) -> None:
    from statemachine_wf.core.store import NewInstance

    store.create(
        NewInstance(
            id="00000000-0000-0000-0000-000000000001",
            type="t.flaky.v1",
            input={"n": "NaN-ish"},
            initial="act",
        )
    )
    client = Client(store, [Flaky])
    run(store, [Flaky], {"calls": {}})
    rec = client.get("00000000-0000-0000-0000-000000000001")
    assert rec.status == Status.FAILED
    assert rec.error is not None
    assert rec.error["code"] == "invalid_input"
    assert "does not validate" in store.dead_letters()[0]["reason"]


def test_step_timeout_is_retried(store: Store) -> None:
    class Timed(Workflow[In, Pr]):
        workflow_type = "t.timed.v1"
        retry_policy = FAST
        seen: list[int]

        @step(initial=True, to=COMPLETED, timeout=0.2)
        def slow(self, ctx: Ctx) -> None:
            self.seen.append(ctx.attempt)
            if ctx.attempt == 1:
                time.sleep(1.0)

    seen: list[int] = []
    client = Client(store, [Timed])
    i = client.start(Timed, In())
    run(store, [Timed], {"seen": seen})
    assert client.status(i) == Status.COMPLETED
    failed = [e for e in client.history(i) if e.event_type == "STEP_FAILED"]
    assert failed[0].error is not None
    assert failed[0].error["code"] == "timeout"


class SocketTimeouts(Workflow[In, Pr]):
    """Actions that raise the built-in TimeoutError themselves, well inside any deadline."""

    workflow_type = "t.socket_timeouts.v1"
    retry_policy = FAST
    errors: ClassVar[ErrorMap] = {TimeoutError: Fail}

    @step(initial=True, to="timed_sync")
    def untimed(self, ctx: Ctx) -> str:
        if ctx.input.mode == "untimed":
            raise TimeoutError("read timed out (socket)")
        return "timed_sync"

    @step(to="timed_async", timeout=30)
    def timed_sync(self, ctx: Ctx) -> str:
        if ctx.input.mode == "timed_sync":
            raise TimeoutError("read timed out (socket)")
        return "timed_async"

    @step(to=COMPLETED, timeout=30)
    async def timed_async(self, ctx: Ctx) -> None:
        if ctx.input.mode == "timed_async":
            raise TimeoutError("read timed out (socket)")


@pytest.mark.parametrize("mode", ["untimed", "timed_sync", "timed_async"])
def test_an_actions_own_timeout_error_is_not_the_step_timeout(store: Store, mode: str) -> None:
    # The step's error map (TimeoutError -> Fail) applies: FAILED at once, no retry, and
    # the error is the action's, not "timed out after None s".
    client = Client(store, [SocketTimeouts])
    i = client.start(SocketTimeouts, In(mode=mode))
    run(store, [SocketTimeouts], {})
    record = client.get(i)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error["step"] == mode
    assert record.error["code"] == "TimeoutError"
    assert record.error["message"] == "read timed out (socket)"
    failed = [e for e in client.history(i) if e.event_type == "STEP_FAILED"]
    assert len(failed) == 1  # mapped to Fail: not retried as a timeout would be


def test_async_step_timeout_is_retried(store: Store) -> None:
    class AsyncTimed(Workflow[In, Pr]):
        workflow_type = "t.async_timed.v1"
        retry_policy = FAST
        seen: list[int]

        @step(initial=True, to=COMPLETED, timeout=0.2)
        async def slow(self, ctx: Ctx) -> None:
            self.seen.append(ctx.attempt)
            if ctx.attempt == 1:
                await asyncio.sleep(5)

    seen: list[int] = []
    client = Client(store, [AsyncTimed])
    i = client.start(AsyncTimed, In())
    run(store, [AsyncTimed], {"seen": seen})
    assert client.status(i) == Status.COMPLETED
    assert seen == [1, 2]
    failed = [e for e in client.history(i) if e.event_type == "STEP_FAILED"]
    assert failed[0].error is not None
    assert failed[0].error["code"] == "timeout"
    assert failed[0].error["message"] == "step 'slow' timed out after 0.2 s"


def test_corrupt_row_is_quarantined_and_the_runner_keeps_going(sqlite_store: Store) -> None:
    import sqlite3

    store = sqlite_store
    client = Client(store, [Flaky])
    bad = client.start(Flaky, In())
    good = client.start(Flaky, In())
    with sqlite3.connect(store.path) as raw:  # type: ignore[attr-defined]
        raw.execute("UPDATE wf_instances SET progress = '{not json' WHERE id = ?", (bad,))
    run(store, [Flaky], {"calls": {}})
    assert client.status(good) == Status.COMPLETED
    letters = store.dead_letters()
    assert letters[0]["instance_id"] == bad
    assert "corrupt row" in letters[0]["reason"]
    task = store.task(bad)
    assert task is not None
    assert task.due_at > time.time() + 3600  # parked, not retried in a hot loop
