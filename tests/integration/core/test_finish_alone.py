"""PostgreSQL: an instance's end claims nothing while such claims keep finding nothing.

The commit that ends an instance claims the worker's next task in the same statement. A
runner whose process makes no starts of its own, fed by starts other processes lease to
its workers asleep, finds nothing that way almost every time, and an empty claim costs
the server more than the end itself: once most of them came back empty (a moving
average), its instances end alone, except one in ``PROBE``, and the worker asks
``next_due`` before it claims (docs/architecture.md, "An end that claims nothing").
"""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_wf import Client, Runner, RunnerOptions, Status
from statemachine_wf.runtime.idle import PROBE
from statemachine_wf.stores.postgres import PostgresStore

from .sleepers import until
from .test_start_leased import In, Quick

pytestmark = pytest.mark.postgres


def _claims_at_the_end(runner: Runner) -> list[bool]:
    """For each instance the runner drives from now on, whether its end claimed."""
    claimed: list[bool] = []
    drive = runner.driver.drive

    def spy(*args: Any, take_next: Any = None, **kwargs: Any) -> Any:
        claimed.append(take_next is not None)
        return drive(*args, take_next=take_next, **kwargs)

    runner.driver.drive = spy  # type: ignore[method-assign]
    return claimed


def _one_at_a_time(
    store: PostgresStore, client: Client, count: int
) -> tuple[list[bool], list[str]]:
    """``count`` workflows started by ``client``, each once the one before completed, on
    one runner of one worker over ``store``: whether each end claimed, and the ids."""
    options = RunnerOptions(concurrency=1, idle_poll=60, reconcile_on_start=False)
    runner = Runner(store, [Quick], options=options)
    claimed = _claims_at_the_end(runner)
    ids: list[str] = []
    runner.start()
    try:
        for n in range(count):
            ids.append(client.start(Quick, In(n=n)))
            until(lambda: client.get(ids[-1]).status == Status.COMPLETED)
    finally:
        runner.stop()
    return claimed, ids


def test_a_runner_fed_by_another_process_ends_its_instances_alone(
    pg_store: PostgresStore, pg_other_store: PostgresStore
) -> None:
    """Each start comes from another process and is handed to the runner's worker
    asleep, so each end's claim finds nothing: after the first few, ends claim nothing
    but one in PROBE, and every workflow still completes, each step once."""
    client = Client(pg_other_store, [Quick])
    claimed, ids = _one_at_a_time(pg_store, client, 40)
    assert len(claimed) == 40
    alone = claimed.count(False)
    assert alone >= 40 - 12 - 40 // PROBE, claimed  # all but the first ~12 and the probes
    assert any(claimed[20:]), "no probe claimed at the end"
    assert pg_store.starts_made() == 0
    for iid in ids:
        kinds = [e.event_type for e in client.history(iid)]
        assert kinds.count("STEP_COMPLETED") == 2
        assert client.verify(iid) == {}


def test_a_runner_whose_process_starts_workflows_claims_at_every_end(
    pg_store: PostgresStore,
) -> None:
    """The same starts made in the runner's own process: the ends' claims find nothing
    as often, but a start made here may be left to such a claim under way, so every end
    claims."""
    claimed, _ = _one_at_a_time(pg_store, Client(pg_store, [Quick]), 30)
    assert pg_store.starts_made() == 30
    assert claimed == [True] * 30


def test_a_runner_on_a_backlog_claims_at_every_end(
    pg_store: PostgresStore, pg_other_store: PostgresStore
) -> None:
    """Work waiting: each end's claim takes the next task, and no end goes alone."""
    client = Client(pg_other_store, [Quick])
    ids = [client.start(Quick, In(n=n)) for n in range(60)]
    options = RunnerOptions(concurrency=2, reconcile_on_start=False)
    runner = Runner(pg_store, [Quick], options=options)
    claimed = _claims_at_the_end(runner)
    runner.start()
    try:
        until(lambda: all(client.get(i).status == Status.COMPLETED for i in ids))
    finally:
        runner.stop()
    assert claimed.count(False) == 0
