"""The pure parts of signals and timers: park, deliver, the fold of waits, the context."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine_wf import COMPLETED, Fail, StepContext, WaitTimeout, Workflow, step
from statemachine_wf.core import decide
from statemachine_wf.core.decide import Continue, Finish, Park
from statemachine_wf.core.fold import Projection, apply_all
from statemachine_wf.core.waits import SignalRecord, deliver, park, reserve
from statemachine_wf.definition.events import Ev, NewEvent
from statemachine_wf.errors import Parked

LIMIT = 1000


class In(BaseModel):
    pass


class Pr(BaseModel):
    got: Any = None


class Gate(Workflow[In, Pr]):
    workflow_type = "test.gate.v1"

    @step(initial=True, to=COMPLETED, signals=["go", "other"])
    def gate(self, ctx: StepContext[In, Pr]) -> None:
        ctx.set(got=ctx.wait_for("go", timeout=10))


SPEC = Gate.spec()


def running() -> Projection:
    created = NewEvent(Ev.CREATED, payload={"initial": "gate"})
    return decide.start(apply_all(Projection(), [created]), "gate").state


def parked(kind: str = "signal", token: str = "T", until: float | None = 100.0) -> Projection:
    exc = Parked(
        key="0", kind=kind, name="go" if kind == "signal" else None, token=token, until=until
    )
    return park(running(), "gate", 1, exc, 0).state


def sig(
    i: int,
    *,
    name: str = "go",
    token: str | None = None,
    kind: str = "signal",
    payload: Any = None,
    due: float | None = None,
    problem: str | None = None,
) -> SignalRecord:
    return SignalRecord(
        id=i,
        instance_id="x",
        kind=kind,
        name="timer" if kind == "timer" else name,
        payload=payload,
        token=token,
        due_at=float(i) if due is None else due,
        state="pending",
        created_at=0.0,
        payload_error=problem,
    )


def test_park_records_the_wait_its_timer_and_parks_the_task() -> None:
    exc = Parked(key="0", kind="signal", name="go", token="T", until=100.0)
    d = park(running(), "gate", 1, exc, 2)
    assert [e.event_type for e in d.events] == [Ev.STEP_WAITING]
    assert d.state.waiting == "0"
    assert d.state.wait == {"kind": "signal", "name": "go", "token": "T", "until": 100.0}
    assert d.state.in_flight is False
    assert d.task == Park("gate", 100.0, "go", 2)
    assert d.signals.timer is not None
    assert (d.signals.timer.token, d.signals.timer.due) == ("T", 100.0)
    no_deadline = park(
        running(), "gate", 1, Parked(key="0", kind="signal", name="go", token="T", until=None), 0
    )
    assert no_deadline.signals.timer is None


def test_the_matching_token_resolves_and_starts_the_step_again() -> None:
    d = deliver(SPEC, parked(), [sig(1, token="T", payload={"a": 1})], max_payload=LIMIT)
    assert [e.event_type for e in d.events] == [Ev.SIGNAL_RECEIVED, Ev.STEP_STARTED]
    assert d.state.waiting is None
    assert d.state.waits["0"]["payload"] == {"a": 1}
    assert d.task == Continue("gate", 2, 0)
    assert d.signals.settled == ((1, "applied"),)
    assert apply_all(parked(), d.events) == d.state


def test_stale_tokens_are_dropped_and_the_wait_goes_on() -> None:
    d = deliver(
        SPEC, parked(), [sig(1, token="old"), sig(2, kind="timer", token="old")], max_payload=LIMIT
    )
    assert [e.event_type for e in d.events] == [Ev.STALE_SIGNAL_DROPPED] * 2
    assert d.signals.settled == ((1, "stale"), (2, "stale"))
    assert d.task == Park("gate", 100.0, "go")
    assert d.state.waiting == "0"


def test_untokened_signals_of_another_name_stay_buffered() -> None:
    d = deliver(SPEC, parked(), [sig(1, name="other")], max_payload=LIMIT)
    assert d.events == ()
    assert d.signals.settled == ()
    assert isinstance(d.task, Park)


def test_the_timer_resolves_a_wait_as_timeout_or_a_sleep_as_slept() -> None:
    d = deliver(SPEC, parked(), [sig(1, kind="timer", token="T")], max_payload=LIMIT)
    assert d.state.waits["0"]["outcome"] == "timeout"
    d = deliver(SPEC, parked("sleep"), [sig(1, kind="timer", token="T")], max_payload=LIMIT)
    assert d.state.waits["0"]["outcome"] == "slept"
    # The earliest row wins: a signal due before the timer resolves the wait.
    rows = [sig(5, kind="timer", token="T", due=5.0), sig(6, payload=1, due=4.0)]
    d = deliver(SPEC, parked(), rows, max_payload=LIMIT)
    assert d.state.waits["0"]["outcome"] == "signal"
    assert dict(d.signals.settled) == {6: "applied", 5: "stale"}


def test_signals_that_cannot_be_applied_are_dead_lettered() -> None:
    rows = [
        sig(1, name="bogus"),
        sig(2, problem="Expecting value"),
        sig(3, payload="x" * 2000),
        sig(4, name="other", token="T"),
    ]
    d = deliver(SPEC, parked(), rows, max_payload=LIMIT)
    assert [e.event_type for e in d.events] == [Ev.SIGNAL_REJECTED] * 4
    reasons = [reason for _, reason in d.signals.dead]
    assert "unknown signal 'bogus'; accepted: ['go', 'other']" in reasons[0]
    assert reasons[1].startswith("payload is not JSON")
    assert reasons[2] == "payload is 2002 bytes; the limit is 1000 bytes"
    assert reasons[3] == "signal 'other' carries the token of a wait for signal 'go'"
    assert all(state == "dead" for _, state in d.signals.settled)
    assert all("token" not in envelope for envelope, _ in d.signals.dead)


def test_a_cancel_request_wins_over_the_resumed_step() -> None:
    state = apply_all(parked(), [NewEvent(Ev.CANCEL_REQUESTED)])
    d = deliver(SPEC, state, [sig(1, payload=1)], max_payload=LIMIT)
    assert d.events[-1].event_type == Ev.CANCELLED
    assert isinstance(d.task, Finish)


def test_waits_are_cleared_when_the_step_completes() -> None:
    d = deliver(SPEC, parked(), [sig(1, payload=1)], max_payload=LIMIT)
    done = decide.success(SPEC, d.state, "gate", 2, None, {"got": 1})
    assert done.state.waits == {}
    assert done.state.waiting is None


# -- the context -----------------------------------------------------------------------
class Host:
    def __init__(self) -> None:
        self.reserved: list[tuple[str, str]] = []

    def save_progress(self, delta: Any) -> None: ...
    def heartbeat(self) -> None: ...
    def cancel_requested(self) -> bool:
        return False

    def acquire(self, key: str) -> str:
        return ""

    def release(self, key: str) -> bool:
        return False

    def reserve_token(self, key: str, token: str) -> None:
        self.reserved.append((key, token))

    def waker(self) -> Any:
        return lambda: None


def ctx(waits: dict[str, dict[str, Any]] | None = None, host: Host | None = None) -> Any:
    return StepContext(
        instance_id="x",
        workflow_type="test.gate.v1",
        step="gate",
        attempt=1,
        input=In(),
        progress={},
        progress_model=Pr,
        host=host or Host(),
        waits=waits,
        signals=["go"],
    )


def test_the_context_parks_then_replays_recorded_outcomes() -> None:
    with pytest.raises(Parked) as parked_exc:
        ctx().wait_for("go", timeout=5)
    assert (parked_exc.value.wait_key, parked_exc.value.kind) == ("0", "signal")
    done = {"0": {"kind": "signal", "name": "go", "token": "T", "outcome": "signal", "payload": 7}}
    assert ctx(done).wait_for("go", timeout=5) == 7
    expired = {"0": {**done["0"], "outcome": "timeout"}}
    with pytest.raises(WaitTimeout, match="no signal 'go' within 5 s"):
        ctx(expired).wait_for("go", timeout=5)
    with pytest.raises(Fail, match="declares only signals=\\['go'\\]"):
        ctx().wait_for("stop")
    with pytest.raises(Fail, match="not deterministic"):
        ctx(done).sleep(1)
    slept = {"0": {"kind": "sleep", "token": "T", "outcome": "slept"}}
    c = ctx(slept)
    c.sleep(1)  # already slept: returns at once
    with pytest.raises(Parked) as second:
        c.sleep(1)
    assert second.value.wait_key == "1"


def test_wait_token_is_recorded_before_it_is_returned_and_reused() -> None:
    host = Host()
    c = ctx(host=host)
    token = c.wait_token
    assert c.wait_token == token
    assert host.reserved == [("0", token)]
    with pytest.raises(Parked) as exc:
        c.wait_for("go")
    assert exc.value.token == token
    # A re-run (the same wait recorded as in progress) parks with the same token/deadline.
    again = ctx({"0": {"kind": "signal", "name": "go", "token": token, "until": 50.0}})
    with pytest.raises(Parked) as same:
        again.wait_for("go", timeout=999)
    assert (same.value.token, same.value.until) == (token, 50.0)
    assert reserve(running(), "gate", 1, "0", token).state.waits == {"0": {"token": token}}


# -- property: whatever arrives, a wait resolves at most once and never by a stale row ---
rows = st.lists(
    st.tuples(
        st.sampled_from(["signal", "timer"]),
        st.sampled_from(["go", "other", "bogus"]),
        st.sampled_from([None, "T", "old"]),
        st.integers(0, 5),
    ),
    max_size=8,
)


@given(rows, st.sampled_from(["signal", "sleep"]), st.booleans())
def test_deliver_resolves_at_most_once_and_never_by_a_stale_row(
    spec_rows: list[tuple[str, str, str | None, int]], kind: str, hold: bool
) -> None:
    state = parked(kind)
    signals = [
        sig(i, kind=k, name=n, token=t if k == "signal" else (t or "T"), due=float(due), payload=i)
        for i, (k, n, t, due) in enumerate(spec_rows, 1)
    ]
    d = deliver(SPEC, state, signals, max_payload=LIMIT, hold=hold)
    by_id = {s.id: s for s in signals}
    settled = dict(d.signals.settled)
    assert len(settled) == len(d.signals.settled)  # each row settled at most once
    applied = [by_id[i] for i, s in settled.items() if s == "applied"]
    assert len(applied) <= 1
    for s in applied:
        assert s.token in (None, "T")
        if s.kind == "signal":
            assert (kind, s.name) == ("signal", "go")
    for s in signals:  # tokened rows and timers are always settled; nothing stale applied
        if s.token is not None or s.kind == "timer":
            assert s.id in settled
        if s.token == "old":  # dropped (or dead-lettered when unusable anyway)
            assert settled[s.id] == ("dead" if s.name == "bogus" else "stale")
    resolved = [e for e in d.events if e.event_type in (Ev.SIGNAL_RECEIVED, Ev.TIMER_FIRED)]
    assert len(resolved) == len(applied)
    assert apply_all(state, d.events) == d.state
    if applied:
        assert d.state.waiting is None
        assert isinstance(d.task, Continue if hold else decide.Reschedule)
    else:
        assert d.state.waiting == "0"
        assert d.task == Park("gate", 100.0, "go" if kind == "signal" else None)
