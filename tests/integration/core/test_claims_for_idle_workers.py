"""A claim takes one task for each of the runner's workers asleep, and hands them over.

Work that arrives at once (a batch started together, timers due together) used to be
taken one claim a worker: the first woken worker claimed one task and woke the next,
which claimed one more. Now the claim asks for one task more for each worker of its
runner asleep, runs the first and hands the others to those workers, which run them
without a claim (docs/architecture.md, "Claims for idle workers").
"""

from __future__ import annotations

import threading
import time
from typing import Any

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
from statemachine_wf.definition.events import Ev


class In(BaseModel):
    pause: float = 0.0


class Pr(BaseModel):
    pass


class Two(Workflow[In, Pr]):
    workflow_type = "t.idle_claims.two.v1"

    @step(initial=True, to="b")
    def a(self, ctx: StepContext[In, Pr]) -> str:
        time.sleep(ctx.input.pause)
        return "b"

    @step(to=COMPLETED)
    def b(self, ctx: StepContext[In, Pr]) -> None:
        return None


class Watched:
    """``store``, recording each claim's limit and what it took; ``handed_claim`` returns
    a claim ``delay`` seconds late (the window between the hand-over and the take)."""

    def __init__(self, store: Store, delay: float = 0.0) -> None:
        self._store, self._delay = store, delay
        self.claims: list[tuple[int, int]] = []
        self.handed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def claim(self, **kwargs: Any) -> Any:
        got = self._store.claim(**kwargs)
        self.claims.append((kwargs.get("limit", 1), len(got)))
        return got

    def handed_claim(self, claimant: Any, **kwargs: Any) -> Any:
        got = self._store.handed_claim(claimant, **kwargs)
        if got is not None:
            self.handed += 1
            time.sleep(self._delay)
        return got


def _until(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _asleep(runner: Runner, count: int) -> None:
    """``count`` workers asleep in the store's wait, where a start or a hand-over finds
    them. Not only in the runner's ``_sleep``: a thread's first wait there returns at once
    (and it claims again), so counting those let a start race the sleepers into the store
    (1 run in 5 on a loaded box made no hand-over at all)."""
    wakeup = runner.store._wakeup  # type: ignore[attr-defined]
    _until(lambda: runner._resting >= count and wakeup.sleeping >= count)


def _ran_once(store: Store, iid: str) -> None:
    """Each step started once, and the instance completed."""
    instance = store.get(iid)
    assert instance is not None
    assert instance.status == Status.COMPLETED
    started = [e.node for e in store.events(iid) if e.event_type == Ev.STEP_STARTED]
    assert started == ["a", "b"]


def test_a_wave_at_idle_workers_is_taken_by_one_claim_and_handed_out(store: Store) -> None:
    watched: Any = Watched(store)
    runner = Runner(watched, [Two], options=RunnerOptions(concurrency=4, idle_poll=5.0))
    runner.start()
    try:
        _asleep(runner, 4)
        ids = Client(store, [Two]).start_many(Two, [In() for _ in range(4)])
        _until(lambda: all(store.get(i).status == Status.COMPLETED for i in ids))  # type: ignore[union-attr]
    finally:
        runner.stop()
    # The first woken worker asked for itself and the three others asleep, and took all.
    took = [got for limit, got in watched.claims if got]
    assert max(took) >= 2, watched.claims
    assert max(limit for limit, _ in watched.claims) >= 3, watched.claims
    assert watched.handed >= 1
    for iid in ids:
        _ran_once(store, iid)


def test_a_claim_handed_over_and_not_yet_taken_keeps_the_runner_busy(store: Store) -> None:
    """``run_until_idle`` must not return while a handed claim waits for its worker: the
    task is leased, not due. Here the take is a second late, after the runner's only
    other work (a slow first step) is done.

    The hand-over needs the two starts taken by one claim. Both sleepers can be woken at
    once (the start's own wake-up and, on SQLite, the watcher hearing its commit), and
    then each claims one and nothing is handed: that run proves nothing, and the scenario
    is run again (each run's instances still all ran once, and the runner returned)."""
    client = Client(store, [Two])
    tries: list[list[tuple[int, int]]] = []
    for _ in range(5):
        watched: Any = Watched(store, delay=1.0)
        slow = client.start(Two, In(pause=0.3))
        runner = Runner(watched, [Two], options=RunnerOptions(concurrency=3, idle_poll=5.0))
        done = threading.Event()

        def run(runner: Runner = runner, done: threading.Event = done) -> None:
            runner.run_until_idle(timeout=30, settle=0.2)
            done.set()

        thread = threading.Thread(target=run)
        thread.start()
        _asleep(runner, 2)  # the third runs the slow step
        ids = client.start_many(Two, [In(), In()])
        thread.join(timeout=60)
        assert done.is_set()
        for iid in [slow, *ids]:
            _ran_once(store, iid)
        tries.append(watched.claims)
        if watched.handed >= 1:
            return
    raise AssertionError(f"no run handed a claim over: {tries}")


def test_claims_handed_over_and_not_taken_are_released_when_the_runner_stops(
    store: Store,
) -> None:
    """Due at once for whoever runs next, their first attempt counted and marked as never
    run (STEP_RELEASED): the next runner starts the second attempt, with no reconcile."""
    client = Client(store, [Two])
    ids = client.start_many(Two, [In(), In()])
    runner = Runner(store, [Two], options=RunnerOptions(concurrency=1))
    claims = store.claim(
        worker=runner.worker_id,
        types=[Two.workflow_type],
        lease=30.0,
        incarnation=runner.incarnation,
        limit=2,
    )
    assert len(claims) == 2
    runner._hand_over(claims)  # never started: no worker takes them
    assert store.next_due(types=[Two.workflow_type]) != 0  # leased
    runner.stop()
    assert store.next_due(types=[Two.workflow_type]) == 0
    for iid in ids:
        task = store.task(iid)
        assert task is not None
        assert (task.lease_owner, task.in_flight) == (None, False)
    Runner(store, [Two]).run_until_idle(timeout=30)
    for iid in ids:
        instance = store.get(iid)
        assert instance is not None
        assert instance.status == Status.COMPLETED
        log = [(e.event_type, e.node, e.attempt) for e in store.events(iid)]
        released = [(n, a) for t, n, a in log if t == Ev.STEP_RELEASED]
        assert released == [("a", 1)]
        starts = [(n, a) for t, n, a in log if t == Ev.STEP_STARTED]
        assert starts == [("a", 1), ("a", 2), ("b", 1)]
