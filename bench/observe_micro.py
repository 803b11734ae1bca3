"""CPU per step of the observer's hooks alone, without a store, metrics off and on:
``python -m bench.observe_micro`` (bench/README.md, "Metrics on")."""

from __future__ import annotations

import time

from statemachine_wf.core.records import InstanceRecord
from statemachine_wf.definition.events import Status
from statemachine_wf.runtime import observe
from statemachine_wf.runtime.observe import Observer, WorkerMetrics

N = 200_000


def _record() -> InstanceRecord:
    now = time.time()
    return InstanceRecord(
        id="i",
        type="bench.three.v1",
        kind="machine",
        status=Status.RUNNING,
        step="a",
        step_attempts=1,
        attempts={"a": 1},
        version=1,
        input={},
        progress={},
        error=None,
        cancel_requested=False,
        idempotency_key=None,
        priority=100,
        parent_id=None,
        created_at=now,
        updated_at=now,
    )


def per_step(obs: Observer, rec: InstanceRecord) -> float:
    """Microseconds of CPU per observed step attempt (its wrapper and its outcome)."""
    t = time.process_time()
    for _ in range(N):
        with obs.step(rec, "a", 2, {"a": 2}):
            observe.mark("completed")
    return (time.process_time() - t) / N * 1e6


def main() -> None:
    rec = _record()
    metrics = WorkerMetrics()
    for _ in range(2):
        off, on = per_step(Observer(), rec), per_step(Observer(metrics), rec)
        print(f"metrics off {off:.2f} us/step; metrics on {on:.2f} us/step")
    t = time.process_time()
    for _ in range(N):
        metrics.claim.labels("machine").observe(0.001)
    print(f"claim histogram: {(time.process_time() - t) / N * 1e6:.2f} us per claim")


if __name__ == "__main__":
    main()
