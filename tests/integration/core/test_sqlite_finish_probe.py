"""SQLite's finish leaves the statements of what an ending instance leaves to others (its
locks and their waiters, its pending signals, a parent's node) out when its probe finds
none of it, and runs them when it finds some (queries.sql, apply_finish's ``-- sets
:ends_rest``)."""

from __future__ import annotations

from statemachine_wf import Status
from statemachine_wf.core.waits import NewSignal
from statemachine_wf.stores.sqlite import SQLiteStore
from tests.contract.helpers import cancelled, started
from tests.integration.core.sqlite_trace import traced

# A fragment of each statement the probe guards, with no parameter in it (the trace
# shows the statements with their parameters written in).
GUARDED = {
    "wake": "WHERE w.key = f.key",
    "locks": "DELETE FROM wf_locks",
    "dead letters": "INSERT INTO wf_dead_letters",
    "signals": "SET state = CASE WHEN kind = 'timer'",
    "parent": "SELECT parent_node FROM wf_instances",
}
PROBE = "AND parent_id IS NOT NULL"


def _ran(seen: list[str]) -> set[str]:
    return {name for name, fragment in GUARDED.items() if any(fragment in s for s in seen)}


def _finish(store: SQLiteStore, instance_id: str) -> list[str]:
    """End the instance with a plain Finish; the statements its commit ran."""
    with traced(store) as seen:
        cancelled(store, instance_id)
    after = store.get(instance_id)
    assert after is not None
    assert after.status == Status.CANCELLED
    return seen


def test_a_finish_with_nothing_left_runs_the_probe_alone(sqlite_store: SQLiteStore) -> None:
    iid = started(sqlite_store).instance.id
    seen = _finish(sqlite_store, iid)
    assert sum(PROBE in s for s in seen) == 1, seen
    assert _ran(seen) == set(), seen


def test_a_finish_with_a_lock_or_a_signal_runs_them_all(sqlite_store: SQLiteStore) -> None:
    holder = started(sqlite_store).instance.id
    assert sqlite_store.acquire_lock("signer:0xabc", holder) == holder
    seen = _finish(sqlite_store, holder)
    assert _ran(seen) == set(GUARDED), seen
    assert sqlite_store.lock_holder("signer:0xabc") is None

    signalled = started(sqlite_store).instance.id
    sqlite_store.signal(NewSignal(signalled, "ping", {"n": 1}))
    seen = _finish(sqlite_store, signalled)
    assert _ran(seen) == set(GUARDED), seen
    assert sqlite_store.signal_counts(instance_id=signalled)["dead"] == 1
