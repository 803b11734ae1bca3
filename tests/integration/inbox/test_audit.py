"""The audit trail on both stores: lifecycle events per instance, and the throttled
HEARTBEAT that the lease-extending statement appends for a claim held across heartbeats."""

from __future__ import annotations

import pytest

from statemachine_wf import Client, Runner, RunnerOptions, Status, Store
from statemachine_wf.cli import main
from statemachine_wf.core.audit import lifecycle
from statemachine_wf.definition.events import Ev

from .flows import Broken, Echo, Slow, run_all


def test_heartbeat_logs_only_claims_seen_before_and_is_throttled(store: Store) -> None:
    client = Client(store, [Echo])
    i = client.start(Echo, {"n": 1})
    [claim] = store.claim(worker="w1", types=["inbox.echo.v1"], lease=30)
    assert claim.started

    def heartbeats() -> list[Ev | str]:
        return [e.event_type for e in store.events(i) if e.event_type == Ev.HEARTBEAT]

    assert store.heartbeat(worker="w1", lease=30, log_every=0) == 1
    assert heartbeats() == []  # first sighting of this claim: a short step logs nothing
    assert store.heartbeat(worker="w1", lease=30, log_every=0) == 1
    assert heartbeats() == [Ev.HEARTBEAT]
    assert store.heartbeat(worker="w1", lease=30, log_every=3600) == 1
    assert heartbeats() == [Ev.HEARTBEAT]  # throttled
    assert store.heartbeat(worker="w1", lease=30) == 1  # no audit asked: plain extension
    assert store.heartbeat(worker="other", lease=30, log_every=0) == 0
    [beat] = [e for e in store.events(i) if e.event_type == Ev.HEARTBEAT]
    assert (beat.worker, beat.node, beat.attempt) == ("w1", "double", 1)
    assert beat.payload == {"lease_seconds": 30}
    assert client.verify(i) == {}  # the fold ignores audit-only events


def test_long_action_gets_heartbeats_in_its_history(store: Store) -> None:
    client = Client(store, [Slow])
    # 2.5 s, lease 1.5 s: a heartbeat every 0.5 s, ~5 in all; the first marks the claim,
    # a later one logs once 0.9 s have passed since the last logged (or the mark): 1 to 2.
    # (A lease of 0.3 s lapsed on a slow CI box, whose heartbeat ran 0.5 s late once: a
    # lapsed lease is no longer the runner's to extend, so nothing was logged.)
    i = client.start(Slow, {"n": 250})
    runner = Runner(
        store,
        [Slow],
        options=RunnerOptions(concurrency=1, lease=1.5, heartbeat_log_every=0.9, worker_id="hb"),
    )
    runner.run_until_idle(timeout=30)
    assert client.status(i) == Status.COMPLETED
    beats = [e for e in client.history(i) if e.event_type == Ev.HEARTBEAT]
    assert 1 <= len(beats) <= 3  # throttled: not one per 0.5 s heartbeat
    assert {(e.worker, e.node) for e in beats} == {("hb", "act")}
    assert [e.event_type for e in client.history(i)][-1] == Ev.COMPLETED


def test_lifecycle_of_a_run_retried_then_failed_and_one_cancelled(
    store: Store, store_url: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    client = Client(store, [Broken, Echo])
    failing = client.start(Broken, {"n": 1})
    cancelled = client.start(Echo, {"n": 1}, delay=3600)
    client.cancel(cancelled)
    ok = client.start(Echo, {"n": 2})
    run_all(store, [Broken, Echo], worker_id="audit-w")

    names = [name for name, _ in lifecycle(client.history(failing))]
    assert names == [
        "created",
        "leased+started",
        "retried",
        "leased+started",
        "failed",
        "dead-lettered",
    ]
    started = [e for n, e in lifecycle(client.history(failing)) if n == "leased+started"]
    assert {e.worker for e in started} == {"audit-w"}  # the lease holder is on the event
    assert [n for n, _ in lifecycle(client.history(cancelled))] == ["created", "cancelled"]
    assert [n for n, _ in lifecycle(client.history(ok))] == [
        "created",
        "leased+started",
        "leased+started",
        "succeeded",
    ]

    url, options = store_url
    argv = ["--db", url, *(["--schema", options["schema"]] if options else [])]
    assert main([*argv, "history", failing, "--lifecycle"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[3] for line in out] == names
    assert "by audit-w" in out[1]
