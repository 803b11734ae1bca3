"""Live updates of state-machine instances (the same ``watch`` as DAGs), on both stores."""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    Fail,
    Runner,
    RunnerOptions,
    Status,
    StepContext,
    Store,
    Workflow,
    step,
)
from statemachine_wf.client.live import Update, watch


class In(BaseModel):
    fail: bool = False


class Pr(BaseModel):
    done: bool | None = None


class TwoSteps(Workflow[In, Pr]):
    workflow_type = "t.live.v1"

    @step(initial=True, to="second")
    def first(self, ctx: StepContext[In, Pr]) -> str:
        if ctx.input.fail:
            raise Fail("refused", code="no")
        return "second"

    @step(to=COMPLETED)
    def second(self, ctx: StepContext[In, Pr]) -> None:
        ctx.set(done=True)


def watch_run(store: Store, instance_id: str) -> list[Update]:
    async def scenario() -> list[Update]:
        async def drain() -> list[Update]:
            return [u async for u in watch(store, instance_id, resync=600)]

        task = asyncio.create_task(drain())
        deadline = time.monotonic() + 30
        while not store.live_hub().active:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        runner = Runner(store, [TwoSteps], options=RunnerOptions(concurrency=2))
        runner.start()
        try:
            return await asyncio.wait_for(task, 60)
        finally:
            runner.stop(timeout=10)

    return asyncio.run(scenario())


def test_state_machine_steps_and_statuses_live(store: Store) -> None:
    client = Client(store, [TwoSteps])
    iid = client.start(TwoSteps, In())
    updates = watch_run(store, iid)
    assert [(u.seq, u.event_type, u.node) for u in updates] == [
        (e.seq, e.event_type, e.node) for e in client.history(iid)
    ]
    assert [(u.event_type, u.status) for u in updates] == [
        ("WORKFLOW_CREATED", Status.PENDING),
        ("STEP_STARTED", Status.RUNNING),
        ("STEP_COMPLETED", Status.RUNNING),
        ("STEP_STARTED", Status.RUNNING),
        ("STEP_COMPLETED", Status.RUNNING),
        ("WORKFLOW_COMPLETED", Status.COMPLETED),
    ]
    # Client.watch is the same iterator; replaying a finished instance ends by itself.
    replayed = asyncio.run(_drain(client, iid, after_seq=updates[2].seq))
    assert [u.seq for u in replayed] == [u.seq for u in updates[3:]]


def test_a_failed_step_ends_the_watch_with_its_error(store: Store) -> None:
    client = Client(store, [TwoSteps])
    iid = client.start(TwoSteps, In(fail=True))
    updates = watch_run(store, iid)
    last = updates[-1]
    assert (last.event_type, last.node, last.status) == ("STEP_FAILED", "first", Status.FAILED)
    assert last.terminal
    assert last.error is not None
    assert last.error["code"] == "no"


async def _drain(client: Client, iid: str, *, after_seq: int) -> list[Update]:
    return [u async for u in client.watch(iid, after_seq=after_seq)]
