"""The worker's metrics count what its runner did (issue 13, item 3), on both stores."""

from __future__ import annotations

import time
import urllib.request

from statemachine_wf import Client, Runner, RunnerOptions, Status, Store
from statemachine_wf.cli.metrics import serve_metrics, worker_metrics
from statemachine_wf.runtime.observe import Observer, WorkerMetrics

from .flows import Doomed, Napper, Stuck, Twice

ALL = [Twice, Napper, Stuck, Doomed]


def _value(m: WorkerMetrics, name: str, **labels: str) -> float:
    v = m.registry.get_sample_value(name, labels)
    return 0.0 if v is None else v


def test_steps_by_outcome_claims_first_step_and_timer_lateness(store: Store) -> None:
    client = Client(store, ALL)
    ids = {cls: client.start(cls, {}) for cls in ALL}
    metrics = WorkerMetrics()
    runner = Runner(store, ALL, options=RunnerOptions(concurrency=2), observer=Observer(metrics))
    runner.run_until_idle(timeout=30)
    assert client.get(ids[Twice]).status == Status.COMPLETED
    assert client.get(ids[Napper]).status == Status.COMPLETED
    assert client.get(ids[Stuck]).status == Status.STALLED
    assert client.get(ids[Doomed]).status == Status.FAILED

    t = Twice.spec().workflow_type
    assert _value(metrics, "swf_steps_started_total", type=t, step="first") == 2
    assert _value(metrics, "swf_steps_retried_total", type=t, step="first") == 1
    assert _value(metrics, "swf_steps_completed_total", type=t, step="first") == 1
    assert _value(metrics, "swf_steps_completed_total", type=t, step="second") == 1
    stuck, doomed = Stuck.spec().workflow_type, Doomed.spec().workflow_type
    assert _value(metrics, "swf_steps_stalled_total", type=stuck, step="wait") == 1
    assert _value(metrics, "swf_steps_failed_total", type=doomed, step="act") == 1
    assert _value(metrics, "swf_steps_completed_total", type=doomed, step="act") == 0
    # Napper's step ran twice (parked on its timer, then woken): one timer delivered.
    nap = Napper.spec().workflow_type
    assert _value(metrics, "swf_steps_started_total", type=nap, step="nap") == 2
    assert _value(metrics, "swf_steps_completed_total", type=nap, step="nap") == 1
    assert _value(metrics, "swf_timer_lateness_seconds_count", type=nap) == 1
    # One first step per instance, whatever its later attempts.
    for cls in ALL:
        wtype = cls.spec().workflow_type
        assert _value(metrics, "swf_start_to_first_step_seconds_count", type=wtype) == 1
    assert _value(metrics, "swf_claim_seconds_count", kind="machine") >= 4
    assert _value(metrics, "swf_lease_takeovers_total", type=t) == 0


def test_a_claim_of_a_step_in_doubt_is_a_takeover(store: Store) -> None:
    client = Client(store, [Twice])
    iid = client.start(Twice, {})
    # A runner that vanished mid-step: it claimed (STEP_STARTED), then nothing.
    ghost = store.claim(worker="ghost", types=[Twice.spec().workflow_type], lease=0.05)
    assert [c.instance.id for c in ghost] == [iid]
    time.sleep(0.1)  # its lease runs out
    metrics = WorkerMetrics()
    Runner(store, [Twice], observer=Observer(metrics)).run_until_idle(timeout=30)
    assert client.get(iid).status == Status.COMPLETED
    assert _value(metrics, "swf_lease_takeovers_total", type=Twice.spec().workflow_type) == 1


def test_the_worker_registry_has_the_store_gauges(store: Store) -> None:
    client = Client(store, [Twice])
    client.start(Twice, {})
    client.start(Twice, {}, delay=3600)
    metrics = worker_metrics(store)
    t = Twice.spec().workflow_type
    depth = metrics.registry.get_sample_value(
        "swf_queue_depth", {"type": t, "kind": "machine", "state": "ready"}
    )
    later = metrics.registry.get_sample_value(
        "swf_queue_depth", {"type": t, "kind": "machine", "state": "later"}
    )
    assert (depth, later) == (1, 1)
    assert metrics.registry.get_sample_value("swf_dead_letters", {"state": "total"}) == 0


def test_the_signer_slot_gauges_say_who_holds_who_waits_and_how_long(store: Store) -> None:
    client = Client(store, [Twice])
    holder, first, second = (client.start(Twice, {}, delay=3600) for _ in range(3))
    key = "eth:31337:0x00000000000000000000000000000000000000aa"
    store.acquire_lock(key, holder)
    store.acquire_lock(key, first)
    time.sleep(0.05)
    store.acquire_lock(key, second)
    metrics = worker_metrics(store)
    sample = metrics.registry.get_sample_value
    assert sample("swf_signer_slot_waiting", {"key": key}) == 2
    held = sample("swf_signer_slot_held_seconds", {"key": key})
    wait = sample("swf_signer_slot_wait_seconds", {"key": key})
    assert held is not None
    assert wait is not None
    assert wait >= 0.05  # the oldest waiter's wait: the newest began 0.05 s later
    assert held >= 0
    store.release_locks(holder)
    store.release_locks(first)
    store.release_locks(second)
    assert sample("swf_signer_slot_wait_seconds", {"key": key}) is None  # nobody holds it


def test_serve_metrics_answers_over_http(sqlite_store: Store) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    metrics = serve_metrics(sqlite_store, "127.0.0.1", port)
    metrics.started.labels("x.v1", "a").inc()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        body = r.read().decode()
    assert 'swf_steps_started_total{step="a",type="x.v1"} 1.0' in body
    assert "swf_queue_depth" in body
