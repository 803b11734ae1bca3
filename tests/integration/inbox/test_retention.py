"""Retention on both stores: purge deletes finished instances (with their events and
tasks) older than the age, in batches, and never active work; soft delete hides a
finished instance from list and status until the purge."""

from __future__ import annotations

import sqlite3

import pytest

from statemachine_wf import Client, InvalidState, NotFound, Status, Store
from statemachine_wf.cli import main

from .flows import Echo, run_all
from .test_dead_letters import raw_sql

DAY = 86400.0


def age(store_url: tuple[str, dict[str, str]], instance_id: str, days: float) -> None:
    """Make an instance look ``days`` old (created and last updated then)."""
    if store_url[0].startswith("sqlite"):
        raw_sql(
            store_url,
            "UPDATE wf_instances SET created_at = created_at - %s, updated_at = updated_at - %s"
            " WHERE id = %s",
            days * DAY,
            days * DAY,
            instance_id,
        )
    else:
        raw_sql(
            store_url,
            "UPDATE wf_instances SET created_at = created_at - %s * interval '1 day',"
            " updated_at = updated_at - %s * interval '1 day' WHERE id = %s",
            days,
            days,
            instance_id,
        )


def count(store_url: tuple[str, dict[str, str]], table: str, instance_id: str) -> int:
    column = "holder" if table == "wf_locks" else "instance_id"
    n: int = raw_sql(store_url, f"SELECT count(*) FROM {table} WHERE {column} = %s", instance_id)
    return n


def test_purge_old_finished_in_batches_never_active_or_young(
    store: Store, store_url: tuple[str, dict[str, str]]
) -> None:
    client = Client(store, [Echo])
    old_done = [client.start(Echo, {"n": k}) for k in range(5)]
    young_done = client.start(Echo, {"n": 9})
    run_all(store, [Echo])
    old_cancelled = client.start(Echo, {"n": 7}, delay=3600)
    client.cancel(old_cancelled)
    old_pending = client.start(Echo, {"n": 8}, delay=3600)  # active: waits for its time
    old_running = client.start(Echo, {"n": 6})
    store.claim(worker="w", types=["inbox.echo.v1"], lease=300)  # RUNNING, leased
    assert client.status(old_running) == Status.RUNNING
    for i in [*old_done, old_cancelled, old_pending, old_running]:
        age(store_url, i, 40)

    batches: list[int] = []
    one_batch = store.purge_batch

    def counted(**kwargs: object) -> int:
        n = one_batch(**kwargs)  # type: ignore[arg-type]
        batches.append(n)
        return n

    store.purge_batch = counted  # type: ignore[method-assign]
    assert client.purge(older_than=30 * DAY, batch_size=2) == 6
    assert batches == [2, 2, 2, 0]  # one transaction per batch
    for gone in [*old_done, old_cancelled]:
        assert store.get(gone) is None
        assert count(store_url, "wf_events", gone) == 0
        assert count(store_url, "wf_tasks", gone) == 0
    assert client.status(young_done) == Status.COMPLETED
    assert client.status(old_pending) == Status.PENDING
    assert client.status(old_running) == Status.RUNNING
    assert store.task(old_pending) is not None
    assert count(store_url, "wf_events", old_running) >= 2
    assert client.purge(older_than=30 * DAY, batch_size=2) == 0  # nothing left to do


def test_soft_delete_hides_until_purged(
    store: Store, store_url: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    client = Client(store, [Echo])
    done = client.start(Echo, {"n": 1})
    other = client.start(Echo, {"n": 2})
    run_all(store, [Echo])
    active = client.start(Echo, {"n": 3}, delay=3600)

    with pytest.raises(InvalidState, match="cancel it first"):
        client.delete(active)
    url, options = store_url
    argv = ["--db", url, *(["--schema", options["schema"]] if options else [])]
    assert main([*argv, "delete", done]) == 0
    client.delete(done)  # twice: harmless
    assert {r.id for r in store.list_instances()} == {other, active}
    assert done in {r.id for r in store.list_instances(include_deleted=True)}
    with pytest.raises(NotFound, match="was deleted"):
        client.status(done)
    kept = client.get(done, include_deleted=True)
    assert kept.deleted_at is not None
    assert kept.status == Status.COMPLETED
    history = [e.event_type for e in client.history(done, include_deleted=True)]
    assert history.count("WORKFLOW_DELETED") == 1

    # A soft purge marks old finished ones; the purge deletes them (and the deleted one).
    age(store_url, other, 40)
    age(store_url, done, 40)
    capsys.readouterr()
    assert main([*argv, "purge", "--older-than", "30d", "--batch", "10", "--soft"]) == 0
    assert "marked deleted 1 finished instance(s)" in capsys.readouterr().out
    assert {r.id for r in store.list_instances()} == {active}
    assert main([*argv, "purge", "--older-than", "30d", "--batch", "10"]) == 0
    assert "purged 2 finished instance(s)" in capsys.readouterr().out
    assert store.get(done) is None
    assert store.get(other) is None
    assert client.status(active) == Status.PENDING


def test_purge_arguments_are_checked(store: Store) -> None:
    client = Client(store)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        client.purge(older_than=DAY, batch_size=0)
    with pytest.raises(ValueError, match="older_than must be >= 0"):
        client.purge(older_than=-1)
    assert main(["--db", "sqlite:///:memory:", "purge", "--older-than", "30 days"]) == 2


def age_letter(store_url: tuple[str, dict[str, str]], letter_id: int, days: float) -> None:
    if store_url[0].startswith("sqlite"):
        statement = "UPDATE wf_dead_letters SET created_at = created_at - %s WHERE id = %s"
        raw_sql(store_url, statement, days * DAY, letter_id)
    else:
        statement = (
            "UPDATE wf_dead_letters SET created_at = created_at - %s * interval '1 day'"
            " WHERE id = %s"
        )
        raw_sql(store_url, statement, days, letter_id)


def test_purge_dead_letters_older_than_the_age_redriven_or_not(
    store: Store, store_url: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    client = Client(store, [Echo])
    for n in range(4):
        envelope = {"type": "inbox.echo.v1", "input": {"n": n}}
        store.dead_letter(instance_id=None, envelope=envelope, reason=f"r{n}", worker="t")
    letters = {d["reason"]: d["id"] for d in client.dead_letters()}
    redriven = client.redrive(letters["r0"])
    assert redriven.action == "started"
    for reason in ("r0", "r1", "r2"):
        age_letter(store_url, letters[reason], 40)
    done = client.start(Echo, {"n": 9})
    run_all(store, [Echo])
    age(store_url, done, 40)

    assert client.purge_dead_letters(older_than=30 * DAY, batch_size=2) == 3
    assert [d["reason"] for d in client.dead_letters()] == ["r3"]  # the young one stays
    assert store.get(done) is not None  # instances are purge()'s business, not this one's
    assert store.get(str(redriven.instance_id)) is not None  # nor the redriven run
    assert client.purge_dead_letters(older_than=30 * DAY) == 0

    url, options = store_url
    argv = ["--db", url, *(["--schema", options["schema"]] if options else [])]
    age_letter(store_url, letters["r3"], 40)
    capsys.readouterr()
    assert main([*argv, "purge", "--older-than", "30d", "--soft", "--dead-letters"]) == 2
    assert "--soft applies to instances only" in capsys.readouterr().err
    assert len(client.dead_letters()) == 1  # refused: nothing was touched
    assert store.get(done) is not None
    assert main([*argv, "purge", "--older-than", "30d", "--dead-letters"]) == 0
    out = capsys.readouterr().out
    assert "purged 1 finished instance(s)" in out
    assert "purged 1 dead letter(s)" in out
    assert client.dead_letters() == []
    with pytest.raises(ValueError, match="older_than must be >= 0"):
        client.purge_dead_letters(older_than=-1)


def test_purge_cascade_into_lock_waiters_uses_an_index(
    store: Store, store_url: tuple[str, dict[str, str]]
) -> None:
    # The cascade of a purged instance runs this lookup; without migration 009's index it
    # scanned all of wf_lock_waiters (its primary key leads with the lock's key).
    lookup = "SELECT 1 FROM wf_lock_waiters WHERE instance_id = "
    url, options = store_url
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            rows = conn.execute("EXPLAIN QUERY PLAN " + lookup + "?", ("i",)).fetchall()
    else:
        import psycopg

        with psycopg.connect(url, options=f"-c search_path={options['schema']}") as conn:
            conn.execute("SET enable_seqscan = off")  # an empty table: ask for the index
            uid = "00000000-0000-0000-0000-000000000000"
            rows = conn.execute("EXPLAIN " + lookup + "%s::uuid", (uid,)).fetchall()
    plan = " ".join(str(r[-1]) for r in rows)
    assert "wf_lock_waiters_instance" in plan, plan
