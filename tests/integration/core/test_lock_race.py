"""Two instances race for one durable lock: every call answers with the one holder."""

from __future__ import annotations

import threading

from pydantic import BaseModel

from statemachine_wf import COMPLETED, Client, StepContext, Store, Workflow, step


class In(BaseModel):
    n: int = 0


class Pr(BaseModel):
    pass


class Idle(Workflow[In, Pr]):
    workflow_type = "t.lockrace.v1"

    @step(initial=True, to=COMPLETED)
    def noop(self, ctx: StepContext[In, Pr]) -> None:
        return None


def test_contended_acquire_always_returns_the_holder(store: Store) -> None:
    client = Client(store, [Idle])
    ids = [client.start(Idle, In(n=n)) for n in range(2)]
    rounds = 300
    barrier = threading.Barrier(2)
    results: list[list[str | BaseException]] = [[], []]

    def race(who: int) -> None:
        for r in range(rounds):
            barrier.wait()
            try:
                results[who].append(store.acquire_lock(f"race:{r}", ids[who]))
            except BaseException as exc:  # recorded: the assertion below names it
                results[who].append(exc)

    threads = [threading.Thread(target=race, args=(who,)) for who in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [x for row in results for x in row if isinstance(x, BaseException)]
    assert errors == []
    for r in range(rounds):
        a, b = results[0][r], results[1][r]
        assert a == b, f"round {r}: the two callers were told different holders"
        assert a in ids
        assert store.lock_holder(f"race:{r}") == a
