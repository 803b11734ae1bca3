"""The Client tries a lost connection once more, only where a second run is safe.

A lost connection (``StoreUnavailable(lost=True)``) is simulated around the real store:
before the statement ran (nothing written) and after it committed (the reply lost). In
both cases the call succeeds and nothing is written twice (issue 14).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from statemachine_wf import Client, Status, Store, StoreUnavailable
from statemachine_wf.runtime import operations

from ..inbox.flows import Echo


def _lose_once(
    monkeypatch: pytest.MonkeyPatch, store: Store, name: str, *, after: bool
) -> list[int]:
    """Make ``store.<name>`` lose its connection once, before or after the real call."""
    real: Callable[..., Any] = getattr(store, name)
    calls: list[int] = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            if after:
                real(*args, **kwargs)  # committed; the reply never arrives
            raise StoreUnavailable("postgres: OperationalError: connection lost", lost=True)
        return real(*args, **kwargs)

    monkeypatch.setattr(store, name, flaky)
    return calls


@pytest.mark.parametrize("after", [False, True], ids=["before", "after-commit"])
@pytest.mark.parametrize("key", [None, "k-1"])
def test_start_survives_a_lost_connection_without_a_duplicate(
    store: Store, monkeypatch: pytest.MonkeyPatch, after: bool, key: str | None
) -> None:
    client = Client(store, [Echo])
    calls = _lose_once(monkeypatch, store, "create", after=after)
    instance_id = client.start(Echo, {"n": 1}, idempotency_key=key)
    assert len(calls) == (1 if after and key is None else 2)
    assert [r.id for r in store.list_instances()] == [instance_id]
    assert client.get(instance_id).status == Status.PENDING


@pytest.mark.parametrize("after", [False, True], ids=["before", "after-commit"])
def test_start_many_survives_a_lost_connection_without_a_duplicate(
    store: Store, monkeypatch: pytest.MonkeyPatch, after: bool
) -> None:
    client = Client(store, [Echo])
    _lose_once(monkeypatch, store, "create_many", after=after)
    ids = client.start_many(Echo, [{"n": 1}, {"n": 2}, {"n": 3}], idempotency_keys=[None, "b", "b"])
    assert ids[1] == ids[2]
    assert {r.id for r in store.list_instances()} == set(ids)
    assert len(store.list_instances()) == 2


@pytest.mark.parametrize("after", [False, True], ids=["before", "after-commit"])
def test_cancel_survives_a_lost_connection_without_a_second_decision(
    store: Store, monkeypatch: pytest.MonkeyPatch, after: bool
) -> None:
    client = Client(store, [Echo])
    instance_id = client.start(Echo, {"n": 1})
    calls = _lose_once(monkeypatch, store, "apply", after=after)
    # Before: the version has not moved, the decision is made and applied again. After
    # the commit: the log ends with the decision's events, so it is done.
    assert client.cancel(instance_id).status == Status.CANCELLED
    assert len(calls) == (1 if after else 2)
    assert client.get(instance_id).status == Status.CANCELLED
    cancelled = [e for e in client.history(instance_id) if e.event_type == "WORKFLOW_CANCELLED"]
    assert len(cancelled) == 1


def test_a_lost_commit_that_others_overtook_is_reported_not_guessed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client(store, [Echo])
    instance_id = client.start(Echo, {"n": 1})

    def overtaken(commit: Any) -> int:
        # Ours did not commit, but somebody else changed the instance meanwhile: the
        # version moved and the log does not end with our decision.
        store.rebuild(instance_id, operations.project(store, client.get(instance_id)))
        raise StoreUnavailable("postgres: OperationalError: connection lost", lost=True)

    monkeypatch.setattr(store, "apply", overtaken)
    with pytest.raises(StoreUnavailable):
        client.cancel(instance_id)
    assert client.get(instance_id).status == Status.PENDING


def test_reads_are_tried_once_more_and_a_timeout_is_not(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client(store, [Echo])
    instance_id = client.start(Echo, {"n": 1})
    calls = _lose_once(monkeypatch, store, "get", after=False)
    assert client.status(instance_id) == Status.PENDING
    assert len(calls) == 2

    def timed_out(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("postgres: PoolTimeout: no connection after 30 s", lost=False)

    monkeypatch.setattr(store, "get", timed_out)
    with pytest.raises(StoreUnavailable, match="PoolTimeout"):
        client.get(instance_id)
