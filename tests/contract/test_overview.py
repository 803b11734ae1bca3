"""The overview reads the dashboard uses (``dashboard.reads.Overview``), on SQLite and
PostgreSQL: a keyset page, counts by status, queue depth, workers, throughput, letters."""

from __future__ import annotations

import time
import uuid

from statemachine_wf import Status
from statemachine_wf.core.store import Store
from statemachine_wf.dashboard.reads import Overview, overview
from tests.integration.core.test_store_contract import new

from .helpers import TYPE, cancelled, claim_one


def _reads(store: Store) -> Overview:
    reads = overview(store)
    assert reads is not None
    return reads


def test_keyset_pages_cover_every_row_once_newest_first(store: Store) -> None:
    ids = [new(store) for _ in range(7)]
    reads = _reads(store)
    seen: list[str] = []
    after = None
    while True:
        page = reads.page_instances(limit=3, after=after)
        if not page:
            break
        seen += [r.id for r in page]
        after = page[-1].id
    assert sorted(seen) == sorted(ids)
    assert len(seen) == len(set(seen))
    keys = [(r.created_at, r.id) for r in reads.page_instances(limit=10)]
    assert keys == sorted(keys, reverse=True)
    # A cursor that names no row gives an empty page rather than an error.
    assert reads.page_instances(after=str(uuid.uuid4())) == []
    assert reads.page_instances(after="not-an-id") == []


def test_page_filters_status_type_time_and_ident(store: Store) -> None:
    keyed = new(store, key="order-42")
    other = new(store, type_="c.other.v1")
    done = new(store)
    cancelled(store, done)
    reads = _reads(store)
    assert [r.id for r in reads.page_instances(ident="order-42")] == [keyed]
    assert [r.id for r in reads.page_instances(ident=other)] == [other]
    assert reads.page_instances(ident="no-such-key") == []
    assert [r.id for r in reads.page_instances(ident=other, status=[Status.FAILED])] == [other]
    assert [r.id for r in reads.page_instances(type_prefix="c.other.")] == [other]
    assert [r.id for r in reads.page_instances(status=[Status.CANCELLED])] == [done]
    now = time.time()
    assert len(reads.page_instances(since=now - 3600, until=now + 60)) == 3
    assert reads.page_instances(since=now + 60) == []
    assert reads.page_instances(until=now - 3600) == []


def test_counts_queue_workers_throughput_and_letters(store: Store) -> None:
    first = new(store)
    new(store)
    new(store, type_="c.later.v1", delay=600)
    done = new(store, type_="c.done.v1")
    cancelled(store, done)
    claim = claim_one(store, worker="worker-a")
    reads = _reads(store)
    counts = reads.status_counts()
    assert counts.get("CANCELLED") == 1
    assert sum(counts.values()) == 4
    depth = {(q["type"], q["kind"]): q for q in reads.queue_depth()}
    assert depth[(TYPE, "machine")] == {
        "type": TYPE,
        "kind": "machine",
        "ready": 1,
        "leased": 1,
        "later": 0,
    }
    assert depth[("c.later.v1", "machine")]["later"] == 1
    assert ("c.done.v1", "machine") not in depth
    workers = reads.workers()
    assert [w["worker"] for w in workers] == ["worker-a"]
    assert workers[0]["leases"] == 1
    assert workers[0]["lease_until"] > time.time()
    assert claim.instance.id == first  # the oldest due task is claimed first
    rows = reads.throughput(since=time.time() - 3600, bucket=60.0)
    assert sum(n for _, what, n in rows if what == "started") == 4
    assert sum(n for _, what, n in rows if what == "finished") == 1
    assert reads.dead_letter_counts() == {"total": 0, "waiting": 0}
    store.dead_letter(instance_id=None, envelope={"x": 1}, reason="r", worker="w")
    assert reads.dead_letter_counts() == {"total": 1, "waiting": 1}


def test_a_page_of_a_deleted_instance_is_hidden_unless_asked(store: Store) -> None:
    gone = new(store)
    cancelled(store, gone)
    assert store.soft_delete(gone)
    reads = _reads(store)
    assert reads.page_instances() == []
    assert [r.id for r in reads.page_instances(include_deleted=True)] == [gone]
