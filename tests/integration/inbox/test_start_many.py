"""Batched enqueue on both stores: ``Client.start_many`` validates every input before
writing anything, writes the batch atomically (one statement on PostgreSQL, one
transaction on SQLite), keeps input order, and is idempotent per key."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from statemachine_wf import Client, InputError, PayloadTooLarge, Status, Store
from statemachine_wf.stores.postgres import PostgresStore

from .flows import Broken, Echo, run_all


def test_ids_in_input_order_one_commit_then_a_runner_completes_them(store: Store) -> None:
    client = Client(store, [Echo])
    ids = client.start_many(Echo, [{"n": n} for n in range(25)], priority=7)
    assert len(set(ids)) == 25
    records = [client.get(i) for i in ids]
    assert [r.input["n"] for r in records] == list(range(25))
    assert {(r.status, r.priority, r.type) for r in records} == {
        (Status.PENDING, 7, "inbox.echo.v1")
    }
    assert [e.event_type for e in client.history(ids[3])] == ["WORKFLOW_CREATED"]
    if isinstance(store, PostgresStore):
        with store._pool.connection() as conn:
            row = conn.execute("SELECT count(DISTINCT xmin::text) AS n FROM wf_instances")
            assert row.fetchone() == {"n": 1}  # one transaction wrote them all
    run_all(store, [Echo])
    assert [client.get(i).progress for i in ids] == [{"doubled": 2 * n} for n in range(25)]
    assert all(client.verify(i) == {} for i in ids)
    assert client.start_many(Echo, []) == []


def test_one_statement_per_batch_on_postgres(pg_dsn: str, pg_schema: str) -> None:
    store = PostgresStore(pg_dsn, schema=pg_schema)
    store.migrate()
    calls: list[str] = []
    one, every = store._one, store._all

    def count_one(query: str, params: dict[str, Any]) -> Any:
        calls.append(query)
        return one(query, params)

    def count_all(query: str, params: dict[str, Any]) -> Any:
        calls.append(query)
        return every(query, params)

    store._one = count_one  # type: ignore[method-assign]
    store._all = count_all  # type: ignore[method-assign]
    try:
        keys = [f"k{n}" for n in range(100)]
        ids = Client(store).start_many(Echo, [{"n": n} for n in range(100)], idempotency_keys=keys)
        assert len(calls) == 1
        again = Client(store).start_many(Echo, [{"n": 0}] * 100, idempotency_keys=keys)
        assert again == ids
        assert len(calls) == 2
    finally:
        store.close()


def test_every_input_is_checked_before_anything_is_written(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client(store, [Echo])
    monkeypatch.setenv("SWF_MAX_PAYLOAD_BYTES", "1000")
    good = [{"n": 1}, {"n": 2}]
    with pytest.raises(InputError, match=r"inputs\[2\] does not fit Order: .*n"):
        client.start_many(Echo, [*good, {"n": "seven"}])
    with pytest.raises(PayloadTooLarge, match=r"inputs\[1\] is \d+ bytes; the limit is 1000"):
        client.start_many(Echo, [good[0], {"n": 2, "note": "x" * 2000}, good[1]])
    with pytest.raises(InputError, match=r"one key .* per input: got 1 for 2 inputs"):
        client.start_many(Echo, good, idempotency_keys=["a"])
    with pytest.raises(InputError, match=r"idempotency_keys\[1\] must be a non-empty string"):
        client.start_many(Echo, good, idempotency_keys=["a", ""])
    with pytest.raises(InputError, match="a sequence of inputs"):
        client.start_many(Echo, {"n": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timezone-aware"):
        client.start_many(Echo, good, run_at=datetime(2030, 1, 1))  # naive: the point
    with pytest.raises(ValueError, match="priority must be >= 0"):
        client.start_many(Echo, good, priority=-1)
    assert store.list_instances() == []
    assert store.dead_letters() == []


def test_idempotent_per_key_and_repeated_keys_in_a_batch(store: Store) -> None:
    client = Client(store, [Echo])
    first = client.start_many(
        Echo, [{"n": 1}, {"n": 2}, {"n": 3}], idempotency_keys=["a", "b", None]
    )
    again = client.start_many(
        Echo, [{"n": 10}, {"n": 20}, {"n": 30}, {"n": 40}], idempotency_keys=["a", "c", "c", None]
    )
    assert again[0] == first[0]  # known key: the existing run
    assert again[1] == again[2]  # repeated in the batch: the first occurrence's run
    assert len({*first, *again}) == 5
    assert client.get(again[1]).input == {"n": 20, "note": ""}
    assert client.get(first[0]).input == {"n": 1, "note": ""}  # not overwritten
    assert len(store.list_instances()) == 5
    assert client.start(Echo, {"n": 99}, idempotency_key="c") == again[1]


def test_a_key_of_another_type_refuses_the_whole_batch(store: Store) -> None:
    client = Client(store, [Echo, Broken])
    other = client.start(Broken, {"n": 1}, idempotency_key="shared")
    with pytest.raises(InputError, match=r"key 'shared' already started a inbox.broken.v1"):
        client.start_many(Echo, [{"n": 1}, {"n": 2}], idempotency_keys=["fresh", "shared"])
    assert [r.id for r in store.list_instances()] == [other]  # 'fresh' was not written


def test_run_at_and_delay_apply_to_the_batch(store: Store) -> None:
    client = Client(store, [Echo])
    later = client.start_many(
        Echo, [{"n": 1}, {"n": 2}], run_at=datetime.now(UTC) + timedelta(hours=1)
    )
    delayed = client.start_many(Echo, [{"n": 3}], delay=600)
    for i in later:
        task = store.task(i)
        assert task is not None
        assert task.due_at > time.time() + 3500
    task = store.task(delayed[0])
    assert task is not None
    assert task.due_at > time.time() + 500
    run_all(store, [Echo])
    assert {client.status(i) for i in [*later, *delayed]} == {Status.PENDING}


def test_concurrent_batches_with_the_same_keys_start_each_key_once(store: Store) -> None:
    client = Client(store, [Echo])
    keys = [f"race-{n}" for n in range(400)]
    results: list[list[str]] = []
    errors: list[BaseException] = []
    gate = threading.Barrier(4)

    def produce(offset: int) -> None:
        order = keys[offset:] + keys[:offset]  # each producer in its own order
        try:
            gate.wait()
            ids = client.start_many(Echo, [{"n": 1}] * len(order), idempotency_keys=order)
            results.append([ids[order.index(k)] for k in keys])
        except BaseException as exc:  # reported below, with the others' results
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(k * 100,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert len(results) == 4
    assert all(r == results[0] for r in results)  # every producer got the same id per key
    assert len(store.list_instances(limit=1000)) == len(keys)
