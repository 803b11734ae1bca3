"""A worker's own commits take its next node (a chain's next node, a fan-out's next
branch) with no claim, for at most ``STREAK`` nodes in a row: then it claims, in priority
order. So a higher-priority instance started behind a long fan-out waits for a streak of
branches, not for the whole fan-out."""

from __future__ import annotations

import threading

from statemachine_wf import Runner, RunnerOptions, Status
from statemachine_wf.core.store import Store
from statemachine_wf.dag import DagBuilder, DagClient, Registry
from statemachine_wf.runtime.operations import STREAK

from . import helpers as h

WIDTH = STREAK + 20


def test_a_higher_priority_instance_runs_after_one_streak_of_a_long_fan_out(store: Store) -> None:
    ran: list[str] = []
    first, go = threading.Event(), threading.Event()
    registry = Registry()

    @registry.function("branch")
    def branch(i: int) -> int:
        if not first.is_set():
            first.set()
            go.wait(10)  # the urgent instance is started while the first branch runs
        ran.append(f"b{i}")
        return i

    @registry.function("urgent")
    def urgent() -> str:
        ran.append("urgent")
        return "done"

    fan = DagBuilder("streak_fan")
    fan.node("s", "start")
    fan.node("e", "end", outputs={"n": "{{ctx.b0}}"})
    for i in range(WIDTH):
        h.py(fan, f"b{i}", "branch", i=i)
        fan.chain("s", f"b{i}", "e")
    one = DagBuilder("streak_urgent")
    one.node("s", "start")
    h.py(one, "u", "urgent")
    one.node("e", "end", outputs={"u": "{{ctx.u}}"})
    one.chain("s", "u", "e")

    client = DagClient(store)
    # One worker: which node it runs next is decided by its commits and its claims alone.
    runner = Runner(store, [], dags=registry, options=RunnerOptions(concurrency=1, idle_poll=0.2))
    runner.start()
    try:
        fan_id = client.start(fan.build(), {}, priority=100)
        assert first.wait(10)
        urgent_id = client.start(one.build(), {}, priority=0)
        go.set()
        assert client.wait(urgent_id, timeout=30).status == Status.COMPLETED
        assert client.wait(fan_id, timeout=30).status == Status.COMPLETED
    finally:
        go.set()
        runner.stop(timeout=10)

    assert sorted(ran) == sorted([*(f"b{i}" for i in range(WIDTH)), "urgent"])
    # The branch that was claimed, then the STREAK branches its commits took one after
    # another; then the worker claimed, and the urgent instance came first. Without the
    # bound it came after all WIDTH branches.
    assert ran.index("urgent") == 1 + STREAK
