"""PostgreSQL: every store call that grows a watched instance's log sends one live
notification, '<instance id> <highest seq>', and nothing for an instance nobody watches
(migration 021: the statements notify; no trigger on wf_events is left to do it).

The DAG paths (dag_claim, dag_tail) are held to the same payloads by
tests/integration/dag/test_live.py; tests/unit/core/test_pg_live_statements.py checks
that every statement that inserts events has its notification.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from statemachine_wf import Client
from statemachine_wf.core import decide
from statemachine_wf.core.store import Commit
from statemachine_wf.stores.postgres import PostgresStore
from tests.plugins.stores import PG_DSN

from .test_finish_claims_next import In, Two

TYPES = [Two.workflow_type]


@pytest.fixture
def listener(pg_store: PostgresStore) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'LISTEN "{pg_store.live_channel}"')
        yield conn


def payloads(listener: psycopg.Connection[Any]) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=0.3)]


@pytest.fixture
def watch(pg_store: PostgresStore) -> Iterator[Callable[[str], None]]:
    """Watch an instance as ``live.watch`` does: through the store's hub (registered)."""
    loop = asyncio.new_event_loop()
    subs: list[Any] = []
    yield lambda instance_id: subs.append(pg_store.live_hub().subscribe(instance_id, loop))
    for sub in subs:
        sub.close()
    loop.close()


def last_seq(pg_store: PostgresStore, instance_id: str) -> int:
    return pg_store.events(instance_id)[-1].seq


def test_each_call_that_grows_a_watched_log_notifies_once_with_its_highest_seq(
    pg_store: PostgresStore, listener: psycopg.Connection[Any], watch: Callable[[str], None]
) -> None:
    client = Client(pg_store, [Two])
    a, b = client.start(Two, In(n=1)), client.start(Two, In(n=2))
    watch(a)
    watch(b)
    assert payloads(listener) == []  # a watch is not an event

    # The claim: a's STEP_STARTED.
    [claim] = pg_store.claim(worker="w", types=TYPES, lease=30)
    assert payloads(listener) == [f"{claim.instance.id} {last_seq(pg_store, claim.instance.id)}"]
    first = claim.instance.id
    other = b if first == a else a

    # A decision of two events (a progress save and more): one notification, its last seq.
    rec = pg_store.get(first)
    assert rec is not None
    d = decide.saved(rec.projection(in_flight=True), "first", 1, {"k": 1})
    pg_store.apply(Commit(first, rec.version, d, "w"))
    assert payloads(listener) == [f"{first} {last_seq(pg_store, first)}"]

    # A finish and the claim after it, one statement: one notification for each instance.
    rec = pg_store.get(first)
    assert rec is not None
    cancel = decide.cancel(rec.projection(in_flight=True), leased=False)
    _, [next_claim] = pg_store.apply_and_claim(
        Commit(first, rec.version, cancel, "w"), types=TYPES, lease=30
    )
    assert next_claim.instance.id == other
    assert sorted(payloads(listener)) == sorted(
        [f"{first} {last_seq(pg_store, first)}", f"{other} {last_seq(pg_store, other)}"]
    )

    # A logged heartbeat: the first marks the claim, the second logs its HEARTBEAT.
    pg_store.heartbeat(worker="w", lease=30, log_every=0)
    assert payloads(listener) == []
    pg_store.heartbeat(worker="w", lease=30, log_every=0)
    assert [e.event_type for e in pg_store.events(other)][-1] == "HEARTBEAT"
    assert payloads(listener) == [f"{other} {last_seq(pg_store, other)}"]

    # A quarantine, and the soft delete of an ended instance.
    pg_store.quarantine(other, reason="test", worker="w")
    assert payloads(listener) == [f"{other} {last_seq(pg_store, other)}"]
    assert pg_store.soft_delete(first)
    assert payloads(listener) == [f"{first} {last_seq(pg_store, first)}"]


def test_an_instance_nobody_watches_sends_nothing(
    pg_store: PostgresStore, listener: psycopg.Connection[Any]
) -> None:
    client = Client(pg_store, [Two])
    iid = client.start(Two, In())
    [claim] = pg_store.claim(worker="w", types=TYPES, lease=30)
    rec = pg_store.get(iid)
    assert rec is not None
    d = decide.cancel(rec.projection(in_flight=True), leased=False)
    pg_store.apply(Commit(iid, claim.instance.version, d, "w"))
    assert pg_store.soft_delete(iid)
    assert len(pg_store.events(iid)) >= 4
    assert payloads(listener) == []


def test_no_trigger_is_left_on_the_events_table(pg_store: PostgresStore) -> None:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal"
            " AND tgrelid = (quote_ident(%s) || '.wf_events')::regclass",
            (pg_store.schema,),
        ).fetchone()
    assert row == (0,)


def test_the_flag_goes_with_the_last_watcher(
    pg_store: PostgresStore, listener: psycopg.Connection[Any]
) -> None:
    client = Client(pg_store, [Two])
    iid = client.start(Two, In())
    loop = asyncio.new_event_loop()
    try:
        hub = pg_store.live_hub()
        first, second = hub.subscribe(iid, loop), hub.subscribe(iid, loop)
        first.close()  # one watcher left: still announced
        [claim] = pg_store.claim(worker="w", types=TYPES, lease=30)
        assert payloads(listener) == [f"{iid} {last_seq(pg_store, iid)}"]
        second.close()  # nobody left: the flag is cleared, nothing is sent
        rec = pg_store.get(iid)
        assert rec is not None
        d = decide.saved(rec.projection(in_flight=True), "first", 1, {"k": 1})
        pg_store.apply(Commit(iid, claim.instance.version, d, "w"))
        assert payloads(listener) == []
    finally:
        loop.close()
