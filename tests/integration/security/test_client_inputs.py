"""Bad arguments to the Python API are InputError naming the argument, on both stores
(issue 9 item 11); nothing is written and valid work alongside runs once.

An instance id that is not a UUID is :class:`~statemachine_wf.client.machine.InvalidId`: an
InputError ("instance_id must be a UUID") that is also a NotFound.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    InputError,
    NotFound,
    Runner,
    RunnerOptions,
    Status,
    StepContext,
    Store,
    Workflow,
    step,
)
from statemachine_wf.client.dag import DagClient
from statemachine_wf.client.machine import InvalidId
from statemachine_wf.definition.events import Ev
from tests.integration.dag.helpers import linear


class In(BaseModel):
    x: float = 0.0
    note: str = ""
    data: dict[str, Any] = {}


class Counted(Workflow[In, BaseModel]):
    workflow_type = "t.client_inputs.v1"
    effects: list[str]
    guard: threading.Lock

    @step(initial=True, to="wait")
    def act(self, ctx: StepContext[In, BaseModel]) -> None:
        with self.guard:
            self.effects.append(ctx.instance_id)

    @step(to=COMPLETED, signals=["go"])
    def wait(self, ctx: StepContext[In, BaseModel]) -> None:
        ctx.wait_for("go")


def written(store: Store) -> tuple[int, int]:
    """How many instances and events the store holds (nothing may change on bad input)."""
    ids = [r.id for r in store.list_instances(limit=1000)]
    return len(ids), sum(len(store.events(i)) for i in ids)


BAD_PRIORITIES = [-1, 2**31, 2**40, 1.5, "1", None, True, math.nan]
BAD_DELAYS = [-1, -0.5, math.nan, math.inf, -math.inf, 1e300, "1", None, True]
BAD_IDS = ["", "not-an-id", "1234", "x" * 500, 42, 1.5, b"0" * 16, "\ud800" * 36]


@pytest.mark.parametrize("value", BAD_PRIORITIES)
def test_bad_priority_is_an_input_error_naming_it(store: Store, value: Any) -> None:
    client = Client(store, [Counted])
    before = written(store)
    with pytest.raises(InputError, match="priority"):
        client.start(Counted, In(), priority=value)
    with pytest.raises(InputError, match="priority"):
        client.start_many(Counted, [In()], priority=value)
    with pytest.raises(InputError, match="priority"):
        DagClient(store).start(linear(), {"x": 1}, priority=value)
    assert written(store) == before


@pytest.mark.parametrize("value", BAD_DELAYS)
def test_bad_delay_is_an_input_error_naming_it(store: Store, value: Any) -> None:
    client = Client(store, [Counted])
    iid = client.start(Counted, In())
    before = written(store)
    with pytest.raises(InputError, match="delay"):
        client.start(Counted, In(), delay=value)
    with pytest.raises(InputError, match="delay"):
        client.start_many(Counted, [In()], delay=value)
    with pytest.raises(InputError, match="delay"):
        client.signal(iid, "go", delay=value)
    assert written(store) == before
    assert not any(client.signal_counts(iid).values())


def test_a_run_at_past_the_duration_limit_is_refused_like_a_delay(store: Store) -> None:
    """Year 9999 was accepted while ``delay`` stops at 100 years: one bound for both."""
    client = Client(store, [Counted])
    before = written(store)
    far = datetime(9999, 1, 1, tzinfo=UTC)
    with pytest.raises(InputError, match="run_at must be at most"):
        client.start(Counted, In(), run_at=far)
    with pytest.raises(InputError, match="run_at must be at most"):
        client.start_many(Counted, [In()], run_at=far)
    assert written(store) == before
    assert client.start(Counted, In(), run_at=datetime.now(UTC) + timedelta(days=365))


def _id_calls(client: Client, dags: DagClient) -> list[Callable[[Any], Any]]:
    return [
        client.get,
        client.status,
        client.history,
        client.verify,
        client.rebuild,
        client.cancel,
        client.resume,
        client.retry,
        client.delete,
        client.signal_counts,
        lambda i: client.signal(i, "go"),
        lambda i: client.start(Counted, In(), instance_id=i),
        dags.get,
        dags.cancel,
        dags.stop_test_run,
        lambda i: dags.start(linear(), {"x": 1}, instance_id=i),
    ]


@pytest.mark.parametrize("value", BAD_IDS)
def test_an_id_that_is_not_a_uuid_is_one_error_everywhere(store: Store, value: Any) -> None:
    client, dags = Client(store, [Counted]), DagClient(store)
    client.start(Counted, In())
    before = written(store)
    for call in _id_calls(client, dags):
        with pytest.raises(InvalidId, match="instance_id must be a UUID") as info:
            call(value)
        assert isinstance(info.value, InputError)
        assert isinstance(info.value, NotFound)  # what callers catching NotFound expect
    assert written(store) == before


def _other_spellings(iid: str) -> list[str]:
    """Spellings uuid.UUID reads as ``iid`` that are not its canonical text."""
    u = uuid.UUID(iid)
    return [iid.upper(), "{" + iid + "}", u.urn, u.hex, iid[:8] + iid[9:]]


def test_other_spellings_of_a_uuid_are_refused_alike_on_both_stores(store: Store) -> None:
    """Before: PostgreSQL's uuid column read ``ID.upper()``, ``{id}``, ``urn:uuid:id`` and
    the bare hex as the instance, SQLite's text column found nothing (and a start stored
    the spelling as given); now both refuse them, naming the canonical form."""
    client, dags = Client(store, [Counted]), DagClient(store)
    iid = client.start(Counted, In())
    fresh = str(uuid.uuid4())
    before = written(store)
    for spelling in [*_other_spellings(iid), *_other_spellings(fresh)]:
        canonical = str(uuid.UUID(spelling))
        for call in _id_calls(client, dags):
            with pytest.raises(
                InvalidId, match="instance_id must be a UUID in its canonical"
            ) as info:
                call(spelling)
            assert repr(canonical) in str(info.value)
            assert isinstance(info.value, InputError)
    assert written(store) == before
    assert client.get(iid).status == Status.PENDING
    assert not client.get(iid).cancel_requested


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("x", math.nan),
        ("x", math.inf),
        ("x", -math.inf),
        ("note", "a\ud800b"),
        ("data", {"k": [1, math.nan]}),
        ("data", {"\udfff": 1}),
    ],
)
def test_nan_and_lone_surrogates_in_an_input_are_refused_naming_the_field(
    store: Store, field: str, value: Any
) -> None:
    # Before: PostgreSQL raised a raw driver error, SQLite stored the NaN.
    client, dags = Client(store, [Counted]), DagClient(store)
    with pytest.raises(InputError, match=rf"input\.{field}"):
        client.start(Counted, {field: value})
    with pytest.raises(InputError, match=rf"inputs\[0\]\.{field}"):
        client.start_many(Counted, [{field: value}])
    with pytest.raises(InputError, match=rf"input\.{field}"):
        dags.start(linear(), {field: value})
    assert written(store) == (0, 0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"payload": "a\ud800"}, "payload"),
        ({"payload": {"k": ["\udc00"]}}, r"payload\.k\[0\]"),
        ({"payload": {"n": math.nan}}, r"payload\.n"),
        ({"token": "t\ud800"}, "token"),
        ({"token": "t\x00"}, "token"),
    ],
)
def test_a_signal_with_a_lone_surrogate_is_an_input_error_not_not_found(
    store: Store, kwargs: dict[str, Any], field: str
) -> None:
    client = Client(store, [Counted])
    iid = client.start(Counted, In())
    with pytest.raises(InputError, match=field):
        client.signal(iid, "go", **kwargs)
    assert not any(client.signal_counts(iid).values())


def test_bad_idempotency_keys_are_input_errors(store: Store) -> None:
    client = Client(store, [Counted])
    for key in ["", "k\x00", "k\ud800", 5]:
        with pytest.raises(InputError, match="idempotency_key"):
            client.start(Counted, In(), idempotency_key=key)  # type: ignore[arg-type]
    assert written(store) == (0, 0)


# -- the Python-API channel, at random --------------------------------------------------------
bad_calls = st.one_of(
    st.tuples(st.just("start.priority"), st.sampled_from(BAD_PRIORITIES)),
    st.tuples(st.just("start.delay"), st.sampled_from(BAD_DELAYS)),
    st.tuples(st.just("start_many.priority"), st.sampled_from(BAD_PRIORITIES)),
    st.tuples(st.just("signal.delay"), st.sampled_from(BAD_DELAYS)),
    st.tuples(
        st.just("id"),
        st.one_of(
            st.sampled_from(BAD_IDS),
            st.text(max_size=40).filter(lambda s: not _is_uuid(s)),
            st.integers(),
        ),
    ),
    st.tuples(
        st.just("start.input"),
        st.one_of(
            st.sampled_from([math.nan, math.inf, -math.inf]).map(lambda v: {"x": v}),
            st.text(
                alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1
            ).map(lambda s: {"note": "ok" + s}),
            st.floats(allow_nan=True, allow_infinity=True)
            .filter(lambda f: not math.isfinite(f))
            .map(lambda v: {"data": {"deep": [{"v": v}]}}),
        ),
    ),
    st.tuples(
        st.just("signal.payload"),
        st.one_of(
            st.sampled_from([math.nan, math.inf]).map(lambda v: {"v": v}),
            st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1),
        ),
    ),
)


def _bad_calls(
    client: Client, dags: DagClient, valid: str, kind: str
) -> list[Callable[[Any], Any]]:
    """The calls that take a bad value of ``kind``."""
    if kind == "id":
        return _id_calls(client, dags)
    calls: dict[str, Callable[[Any], Any]] = {
        "start.priority": lambda v: client.start(Counted, In(), priority=v),
        "start.delay": lambda v: client.start(Counted, In(), delay=v),
        "start_many.priority": lambda v: client.start_many(Counted, [In(), In()], priority=v),
        "signal.delay": lambda v: client.signal(valid, "go", delay=v),
        "start.input": lambda v: client.start(Counted, v),
        "signal.payload": lambda v: client.signal(valid, "go", v),
    }
    return [calls[kind]]


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(calls=st.lists(bad_calls, min_size=1, max_size=8))
def test_random_bad_arguments_are_refused_and_valid_work_runs_once(
    store: Store, calls: list[tuple[str, Any]]
) -> None:
    client, dags = Client(store, [Counted]), DagClient(store)
    valid = client.start(Counted, In(x=1.5, note="fine"))
    before = written(store)
    signals_before = client.signal_counts(valid)
    for kind, value in calls:
        for call in _bad_calls(client, dags, valid, kind):
            with pytest.raises(InputError):
                call(value)
    assert written(store) == before
    assert client.signal_counts(valid) == signals_before
    effects: list[str] = []
    client.signal(valid, "go", {"ok": True})
    Runner(
        store,
        [Counted],
        options=RunnerOptions(concurrency=1, idle_poll=0.2),
        dependencies={"effects": effects, "guard": threading.Lock()},
    ).run_until_idle(timeout=20)
    record = client.get(valid)
    assert record.status == Status.COMPLETED
    assert effects.count(valid) == 1
    assert [e.event_type for e in client.history(valid)].count(Ev.COMPLETED) == 1
