"""Signals and timers on both stores: waits, timeouts, sleeps, tokens, duplicates, cancel.

A runner runs in this process (threads); every test uses the ``store`` fixture (SQLite
and PostgreSQL). Producer paths other than Python (psql, the sqlite3 shell, the CLI) are
in ``test_producers.py``; runner processes killed and restarted in ``test_recovery.py``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from statemachine_wf import (
    Client,
    InputError,
    InvalidState,
    NotFound,
    PayloadTooLarge,
    Runner,
    RunnerOptions,
    Status,
    Store,
)
from statemachine_wf.core.audit import lifecycle
from statemachine_wf.core.store import Commit
from statemachine_wf.core.waits import deliver
from statemachine_wf.definition.events import Ev
from statemachine_wf.definition.limits import max_payload_bytes
from statemachine_wf.errors import ConcurrencyConflict
from statemachine_wf.stores import open_store
from tests.integration.crash.harness import poll_until

from .workflows import AFTER, HOLD, RUNS, WORKFLOWS, Approval, Sleeper


@contextmanager
def running(store: Store, *, concurrency: int = 2) -> Iterator[Runner]:
    runner = Runner(store, WORKFLOWS, options=RunnerOptions(concurrency=concurrency, lease=10))
    runner.start()
    try:
        yield runner
    finally:
        runner.stop()


def until_waiting(store: Store, instance_id: str, key: str = "0") -> None:
    def parked() -> bool:
        record = store.get(instance_id)
        return record is not None and record.waiting == key

    poll_until(parked, timeout=20, what=f"{instance_id} to wait (wait #{key})")


def events_of(store: Store, instance_id: str, event_type: Ev) -> list[dict[str, object]]:
    return [e.payload for e in store.events(instance_id) if e.event_type == event_type]


def test_wait_for_a_signal_resumes_the_step_once(store: Store) -> None:
    client = Client(store, WORKFLOWS)
    with running(store):
        iid = client.start(Approval, {"timeout": 60})
        until_waiting(store, iid)
        wait = client.get(iid).wait
        assert wait is not None
        assert (wait["kind"], wait["name"]) == ("signal", "approved")
        assert len(str(wait["token"])) == 32
        client.signal(iid, "approved", {"by": "ann"})
        record = client.wait(iid, timeout=20)
    assert record.status == Status.COMPLETED
    assert record.progress["approved"] == {"by": "ann"}
    assert (RUNS[iid], AFTER[iid]) == (2, 1)  # ran up to the wait, then once through
    types = [e.event_type for e in store.events(iid)]
    assert types.index(Ev.STEP_WAITING) < types.index(Ev.SIGNAL_RECEIVED)
    assert events_of(store, iid, Ev.SIGNAL_RECEIVED)[0]["payload"] == {"by": "ann"}
    assert client.verify(iid) == {}
    # The signal applied; the wait's timer was voided when the instance ended.
    assert client.signal_counts(iid) == {
        "pending": 0,
        "applied": 1,
        "stale": 0,
        "dead": 0,
        "void": 1,
    }


def test_wait_timeout_raises_wait_timeout_in_the_step(store: Store) -> None:
    client = Client(store, WORKFLOWS)
    with running(store):
        iid = client.start(Approval, {"timeout": 0.2})
        record = client.wait(iid, timeout=20)
    assert record.status == Status.COMPLETED
    assert record.progress["expired"] is True
    assert "approved" not in record.progress
    fired = events_of(store, iid, Ev.TIMER_FIRED)
    assert [f["outcome"] for f in fired] == ["timeout"]
    names = [n for n, _ in lifecycle(client.history(iid))]
    assert names[names.index("waiting") :][:2] == ["waiting", "timer fired"]
    assert client.verify(iid) == {}
    assert client.signal_counts(iid)["applied"] == 1  # the timer row


def test_sleep_and_sleep_until_are_durable_timers(store: Store) -> None:
    client = Client(store, WORKFLOWS)
    with running(store):
        at = time.time() + 0.3
        napping = client.start(Sleeper, {"seconds": 0.2})
        until = client.start(Sleeper, {"until": at})
        for iid in (napping, until):
            assert client.wait(iid, timeout=20).status == Status.COMPLETED
    for iid in (napping, until):
        waiting = events_of(store, iid, Ev.STEP_WAITING)
        assert len(waiting) == 1
        assert waiting[0]["kind"] == "sleep"
        assert [f["outcome"] for f in events_of(store, iid, Ev.TIMER_FIRED)] == ["slept"]
        woke = client.get(iid).progress["woke_at"]
        assert woke >= waiting[0]["until"]  # a timer never fires early
        assert (RUNS[iid], AFTER[iid]) == (2, 1)
        assert client.verify(iid) == {}
    assert events_of(store, until, Ev.STEP_WAITING)[0]["until"] == pytest.approx(at)


def test_a_timer_fires_while_the_step_resumed_by_the_previous_one_still_runs(
    store: Store,
) -> None:
    """A worker busy in a resumed step holds no timer: the next timer fires while that
    step is still running (the safety poll is a minute here, longer than the test waits)."""
    client = Client(store, WORKFLOWS)
    HOLD.clear()
    options = RunnerOptions(concurrency=3, lease=10, idle_poll=60)
    runner = Runner(store, WORKFLOWS, options=options)
    runner.start()
    try:
        now = time.time()
        held = client.start(Sleeper, {"until": now + 1.0, "hold": True})
        later = client.start(Sleeper, {"until": now + 1.5})
        assert client.wait(later, timeout=30).status == Status.COMPLETED
        # ... while the first sleeper, resumed before it, is still inside its step.
        assert AFTER[held] == 1
        assert client.get(held).status == Status.RUNNING
    finally:
        HOLD.set()
        runner.stop()
    with running(store):
        assert client.wait(held, timeout=20).status == Status.COMPLETED
    assert (RUNS[held], AFTER[held]) == (2, 1)


def _recorded(store: Store) -> list[tuple[int, str, Any]]:
    """The store's claim, apply and nudge calls from now on, per thread, in order (a
    claim with what it returned)."""
    calls: list[tuple[int, str, Any]] = []
    for name in ("claim", "apply", "nudge"):
        method = getattr(store, name)

        def record(*args: Any, _method: Any = method, _name: str = name, **kw: Any) -> Any:
            if _name != "claim":  # noted on entry: an apply's own nudges come after it
                calls.append((threading.get_ident(), _name, None))
            result = _method(*args, **kw)
            if _name == "claim":
                calls.append((threading.get_ident(), _name, result))
            return result

        setattr(store, name, record)
    return calls


def _after_claim(
    calls: list[tuple[int, str, Any]], iid: str, started: bool, *, fired: bool = False
) -> list[str]:
    """The two calls the claiming thread made after its first claim of ``iid`` that did
    (or did not) start a step (``fired``: after firing the wait's timer)."""
    for i, (thread, name, result) in enumerate(calls):
        if name == "claim" and any(
            c.instance.id == iid and (c.started, c.started and bool(c.signals)) == (started, fired)
            for c in result
        ):
            return [n for t, n, _ in calls[i + 1 :] if t == thread][:2]
    raise AssertionError(f"no claim of {iid} with started={started}, fired={fired}")


def test_a_resume_passes_the_wake_up_baton_after_its_deliver_commit(store: Store) -> None:
    """The worker that claims a waiting instance to deliver its signal wakes the next idle
    worker only once the resume is committed, so that worker's claim and next_due do not
    compete with it; any other claim that saw more work due passes the baton at once
    (here a sleeper, started just after, is due when the first is claimed; the resume is
    the timer holder's - the sleeper's timer is still to come - which passes it whatever it
    saw).

    One worker, so that it is the timer holder when the signal comes: with two, the other
    one could claim the resume itself, as a worker that held no timer and saw nothing else
    due; it then rightly passes no baton at all (seen once in CI)."""
    calls = _recorded(store)
    client = Client(store, WORKFLOWS)
    iid = client.start(Approval, {})
    other = client.start(Sleeper, {"seconds": 3.0})  # its timer fires after iid's resume
    with running(store, concurrency=1) as runner:
        until_waiting(store, iid)
        until_waiting(store, other)
        # Sent once the worker holds the sleeper's timer: sent earlier, the claim after the
        # sleeper's park could take the resume as a worker that held nothing and saw nothing
        # else due, and rightly pass no baton at all.
        poll_until(lambda: runner._idle._timer[0] is not None, timeout=20, what="a timer holder")
        client.signal(iid, "approved", {"by": "ann"})
        assert client.wait(iid, timeout=20).status == Status.COMPLETED
        assert client.wait(other, timeout=20).status == Status.COMPLETED
    assert _after_claim(calls, iid, True) == ["nudge", "apply"]  # the first run: at once
    assert _after_claim(calls, iid, False) == ["apply", "nudge"]  # after the deliver commit


def test_a_due_timer_is_fired_by_the_claim_that_takes_it(store: Store) -> None:
    """A wait whose one due pending row is its own timer needs no deliver commit: the claim
    writes TIMER_FIRED and the step's STEP_STARTED, applies the timer and returns it with
    the claim (the timer-lateness metric), and the step runs at once. Its worker held the
    timer, so it passes the baton at once (another idle worker must hold the next one)."""
    calls = _recorded(store)
    client = Client(store, WORKFLOWS)
    iid = client.start(Sleeper, {"seconds": 1.0})  # the worker holds the timer by then
    with running(store, concurrency=1):
        assert client.wait(iid, timeout=20).status == Status.COMPLETED
    fired = [
        c
        for _, name, result in calls
        if name == "claim"
        for c in result
        if c.instance.id == iid and c.signals
    ]
    assert len(fired) == 1
    assert fired[0].started
    assert [(s.kind, s.state) for s in fired[0].signals or ()] == [("timer", "applied")]
    assert fired[0].instance.waiting is None
    # The baton passed at once, before the step ran (its commit, a finish, claims too).
    assert _after_claim(calls, iid, True, fired=True)[0] == "nudge"
    # Every claim of iid started its step: none was left to a deliver commit.
    assert all(
        c.started for _, name, r in calls if name == "claim" for c in r if c.instance.id == iid
    )
    types = [e.event_type for e in store.events(iid)]
    at = types.index(Ev.TIMER_FIRED)
    assert types[at - 1 : at + 2] == [Ev.STEP_WAITING, Ev.TIMER_FIRED, Ev.STEP_STARTED]
    assert client.signal_counts(iid)["applied"] == 1
    assert sum(client.signal_counts(iid).values()) == 1


def test_stale_tokens_are_dropped_logged_and_counted(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    client = Client(store, WORKFLOWS)
    with running(store):
        iid = client.start(Approval, {"share_token": True, "second": True, "timeout": 60})
        until_waiting(store, iid)
        first = client.get(iid).progress["token"]  # handed out before the wait
        assert client.get(iid).wait["token"] == first  # type: ignore[index]

        client.signal(iid, "approved", {"forged": True}, token="not-the-token")
        poll_until(lambda: client.signal_counts(iid)["stale"] == 1, timeout=20, what="a stale drop")
        assert client.get(iid).waiting == "0"  # still waiting, nothing applied

        client.signal(iid, "approved", {"ok": True}, token=first)
        until_waiting(store, iid, key="1")
        second = client.get(iid).wait["token"]  # type: ignore[index]
        assert second != first  # every wait has a fresh token

        client.signal(iid, "approved", {"late": True}, token=first)  # the old wait's token
        poll_until(
            lambda: client.signal_counts(iid)["stale"] == 2, timeout=20, what="a 2nd stale drop"
        )
        client.signal(iid, "second", 2)
        record = client.wait(iid, timeout=20)
    assert record.status == Status.COMPLETED
    assert record.progress["approved"] == {"ok": True}
    assert record.progress["second"] == 2
    dropped = events_of(store, iid, Ev.STALE_SIGNAL_DROPPED)
    assert [d["name"] for d in dropped] == ["approved", "approved"]
    assert client.signal_counts()["stale"] == 2  # the global counter too
    assert sum("stale signal" in r.getMessage() for r in caplog.records) == 2
    assert "not-the-token" not in caplog.text  # tokens stay out of the logs
    assert AFTER[iid] == 1
    assert client.verify(iid) == {}
    waits = {"waiting", "signal received", "stale signal dropped"}
    names = [n for n, _ in lifecycle(client.history(iid)) if n in waits]
    assert names == ["waiting", "stale signal dropped", "signal received"] * 2


def test_duplicate_delivery_applies_once(
    store: Store, store_url: tuple[str, dict[str, str]]
) -> None:
    client = Client(store, WORKFLOWS)
    with running(store):
        iid = client.start(Approval, {"share_token": True, "timeout": 60})
        until_waiting(store, iid)
    token = client.get(iid).progress["token"]
    # An at-least-once producer retried: the same signal twice, no runner up.
    client.signal(iid, "approved", {"n": 1}, token=token)
    client.signal(iid, "approved", {"n": 1}, token=token)
    # Two runners (two stores, as two processes would have) race for the wake-up.
    url, options = store_url
    other = open_store(url, **options)
    try:
        with running(store), running(other):
            record = client.wait(iid, timeout=20)
    finally:
        other.close()
    assert record.status == Status.COMPLETED
    assert len(events_of(store, iid, Ev.SIGNAL_RECEIVED)) == 1
    assert len(events_of(store, iid, Ev.STALE_SIGNAL_DROPPED)) == 1
    assert AFTER[iid] == 1
    assert client.signal_counts(iid)["applied"] == 1
    assert client.verify(iid) == {}


def test_applying_a_signal_is_version_checked(store: Store) -> None:
    client = Client(store, WORKFLOWS)
    with running(store):
        iid = client.start(Approval, {"timeout": 60})
        until_waiting(store, iid)
    client.signal(iid, "approved", "yes")
    record = client.get(iid)
    pending = store.pending_signals(iid)
    decision = deliver(
        Approval.spec(),
        record.projection(),
        pending,
        max_payload=max_payload_bytes(),
        hold=False,
    )
    store.apply(Commit(iid, record.version, decision, worker="w1"))
    before = len(store.events(iid))
    with pytest.raises(ConcurrencyConflict):  # the same resume again: refused, no effect
        store.apply(Commit(iid, record.version, decision, worker="w2"))
    assert len(store.events(iid)) == before
    assert len(events_of(store, iid, Ev.SIGNAL_RECEIVED)) == 1
    assert store.pending_signals(iid) == []
    with running(store):
        assert client.wait(iid, timeout=20).progress["approved"] == "yes"


def test_the_claim_of_a_waiting_instance_carries_its_due_pending_rows(store: Store) -> None:
    client = Client(store, WORKFLOWS)
    fresh = client.start(Approval, {"timeout": 60})
    fast = store.claim(worker="w1", types=[Approval.workflow_type], lease=3600)
    assert [(c.instance.id, c.started, c.signals) for c in fast] == [(fresh, True, None)]
    with running(store):
        iid = client.start(Approval, {"timeout": 60})
        until_waiting(store, iid)
    client.signal(iid, "second", {"n": 1})  # buffered: not the awaited name, no wake-up
    client.signal(iid, "approved", {"n": 2})  # due now: wakes the wait
    client.signal(iid, "approved", {"n": 3}, delay=3600)  # pending, not due
    claims = store.claim(worker="w2", types=[Approval.workflow_type], lease=10)
    assert [(c.instance.id, c.started) for c in claims] == [(iid, False)], (claims, fresh)
    read = claims[0].signals
    assert read is not None
    # The same rows, in the same order, as the separate read the runner would make.
    assert list(read) == store.pending_signals(iid)
    assert [(s.name, s.payload) for s in read] == [("second", {"n": 1}), ("approved", {"n": 2})]
    store.release(worker="w2")
    with running(store):
        record = client.wait(iid, timeout=20)
    assert record.progress["approved"] == {"n": 2}
    assert client.signal_counts(iid)["applied"] == 1


def test_a_signal_sent_before_the_wait_is_buffered(store: Store) -> None:
    client = Client(store, WORKFLOWS)
    iid = client.start(Approval, {"timeout": 60})
    client.signal(iid, "approved", {"early": True})  # no runner, the step has not run
    assert client.signal_counts(iid)["pending"] == 1
    with running(store):
        record = client.wait(iid, timeout=20)
    assert record.progress["approved"] == {"early": True}
    assert AFTER[iid] == 1
    assert client.signal_counts(iid)["applied"] == 1
    assert client.verify(iid) == {}


def test_cancel_while_waiting_is_immediate(store: Store) -> None:
    client = Client(store, WORKFLOWS)
    with running(store):
        iid = client.start(Approval, {"timeout": 3600})
        until_waiting(store, iid)
        client.signal(iid, "second", "not awaited yet")  # buffered for a later wait
        record = client.cancel(iid)
        assert record.status == Status.CANCELLED  # at once: no step boundary to wait for
        assert record.waiting is None
        with pytest.raises(InvalidState, match="CANCELLED"):
            client.signal(iid, "approved", {})
    assert AFTER[iid] == 0
    # The ended instance voided its timer and dead-lettered what it never applied.
    assert client.signal_counts(iid) == {
        "pending": 0,
        "applied": 0,
        "stale": 0,
        "dead": 1,
        "void": 1,
    }
    letters = [d for d in store.dead_letters() if d["instance_id"] == iid]
    assert [d["reason"] for d in letters] == ["the instance ended before the signal was applied"]
    assert letters[0]["envelope"]["name"] == "second"
    assert client.verify(iid) == {}


def test_bad_signals_are_refused_and_nothing_is_written(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client(store, WORKFLOWS)
    iid = client.start(Approval, {})
    missing = str(uuid.uuid4())
    with pytest.raises(NotFound, match=missing):
        client.signal(missing, "approved")
    with pytest.raises(NotFound, match="not-an-id"):
        client.signal("not-an-id", "approved")
    with pytest.raises(InputError, match=r"no signal 'aproved'.*\['approved', 'second'\]"):
        client.signal(iid, "aproved")
    with pytest.raises(InputError, match="not a valid name"):
        client.signal(iid, "")
    with pytest.raises(InputError, match="not JSON"):
        client.signal(iid, "approved", {"when": object()})
    monkeypatch.setenv("SWF_MAX_PAYLOAD_BYTES", "64")
    with pytest.raises(PayloadTooLarge, match="the limit is 64 bytes"):
        client.signal(iid, "approved", "x" * 100)
    monkeypatch.delenv("SWF_MAX_PAYLOAD_BYTES")
    # The store refuses by itself too (the trigger), whoever calls it.
    from statemachine_wf.core.waits import NewSignal

    with pytest.raises(NotFound, match=missing):
        store.signal(NewSignal(missing, "approved"))
    client.cancel(iid)
    with pytest.raises(InvalidState, match="CANCELLED"):
        client.signal(iid, "approved")
    with pytest.raises(InvalidState):
        store.signal(NewSignal(iid, "approved"))
    assert client.signal_counts() == dict.fromkeys(
        ["pending", "applied", "stale", "dead", "void"], 0
    )
    assert store.signals() == []
