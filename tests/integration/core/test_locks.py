"""Durable instance-owned locks: one holder across steps, waiters woken on release."""

from __future__ import annotations

import threading
import time

from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    Runner,
    RunnerOptions,
    Status,
    StepContext,
    Store,
    Workflow,
    step,
)


class In(BaseModel):
    key: str


class Pr(BaseModel):
    pass


class Holder(Workflow[In, Pr]):
    """Takes the lock in its first step, keeps it through a second, ends (auto-release)."""

    workflow_type = "t.lock.v1"
    log: list[tuple[str, str, float]]
    guard: threading.Lock
    inside: list[int]

    @step(initial=True, to="work")
    def take(self, ctx: StepContext[In, Pr]) -> None:
        ctx.hold(ctx.input.key, recheck=30.0)
        with self.guard:
            self.inside.append(1)
            assert len(self.inside) == 1, "two holders at once"
        self.log.append(("in", ctx.instance_id, time.monotonic()))

    @step(to=COMPLETED)
    def work(self, ctx: StepContext[In, Pr]) -> None:
        ctx.hold(ctx.input.key)  # already ours: a no-op
        time.sleep(0.05)
        with self.guard:
            self.inside.pop()
        self.log.append(("out", ctx.instance_id, time.monotonic()))


def test_one_holder_at_a_time_and_waiters_are_woken(store: Store) -> None:
    client = Client(store, [Holder])
    ids = [client.start(Holder, In(key="signer:31337:0xabc")) for _ in range(4)]
    log: list[tuple[str, str, float]] = []
    deps = {"log": log, "guard": threading.Lock(), "inside": []}
    t0 = time.monotonic()
    Runner(store, [Holder], options=RunnerOptions(concurrency=4), dependencies=deps).run_until_idle(
        timeout=25
    )
    elapsed = time.monotonic() - t0
    assert all(client.status(i) == Status.COMPLETED for i in ids)
    assert elapsed < 15  # woken by the releases, not by the 30 s safety recheck
    # Strictly alternating in/out: the lock was never held twice.
    assert [kind for kind, _, _ in log] == ["in", "out"] * 4
    waits = sum(1 for i in ids for e in client.history(i) if e.event_type == "STEP_WAITING")
    assert waits >= 1
    assert store.lock_holder("signer:31337:0xabc") is None  # released when holders ended
    for i in ids:
        assert client.verify(i) == {}


def test_explicit_release_and_release_on_failure(store: Store) -> None:
    from statemachine_wf import Fail

    class ReleaseEarly(Workflow[In, Pr]):
        workflow_type = "t.lock.early.v1"

        @step(initial=True, to="after")
        def take(self, ctx: StepContext[In, Pr]) -> None:
            ctx.hold(ctx.input.key)
            assert ctx.release(ctx.input.key)
            assert not ctx.release(ctx.input.key)

        @step(to=COMPLETED)
        def after(self, ctx: StepContext[In, Pr]) -> None:
            raise Fail("boom")

    client = Client(store, [ReleaseEarly])
    a = client.start(ReleaseEarly, In(key="k1"))
    Runner(store, [ReleaseEarly]).run_until_idle(timeout=10)
    assert client.status(a) == Status.FAILED
    assert store.lock_holder("k1") is None


def test_snooze_reruns_later_without_counting_a_failure(store: Store) -> None:
    from statemachine_wf import RetryPolicy, Snooze

    class Poll(Workflow[In, Pr]):
        workflow_type = "t.poll.v1"
        retry_policy = RetryPolicy(max_attempts=1)  # any counted failure would stall it

        @step(initial=True, to=COMPLETED)
        def check(self, ctx: StepContext[In, Pr]) -> None:
            if ctx.attempt < 4:
                raise Snooze(0.01, "tx pending")

    client = Client(store, [Poll])
    i = client.start(Poll, In(key="x"))
    Runner(store, [Poll]).run_until_idle(timeout=10)
    assert client.status(i) == Status.COMPLETED
    waits = [e for e in client.history(i) if e.event_type == "STEP_WAITING"]
    assert [e.payload["reason"] for e in waits] == ["tx pending"] * 3
    assert client.verify(i) == {}
