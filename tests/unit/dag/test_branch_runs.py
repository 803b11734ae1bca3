"""``BranchRuns`` (runtime/dag_batch.py) alone, its executor and group commit stood in
for (the real ones: tests/integration/dag/test_branch_runs.py): how many branches a
commit takes, and what a run that stops on an error leaves behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import pytest

from statemachine_wf.core.store import Claim, InstanceRecord, TaskRecord
from statemachine_wf.runtime.dag_batch import BUDGET, RUN, BranchRuns
from statemachine_wf.runtime.dag_cache import Pending
from statemachine_wf.runtime.dag_group import Grouper
from statemachine_wf.runtime.operations import STREAK


def claim(slot: str) -> Claim:
    instance = cast(InstanceRecord, type("I", (), {"id": "i1"})())
    task = cast(TaskRecord, type("T", (), {"slot": slot})())
    return Claim(task, instance, started=True)


class Group:
    """Commits each queued completion; the last, when free, takes ``next`` for its
    worker; ``fail`` is the error every item gets instead."""

    def __init__(self, next_claims: list[Claim] | None = None, fail: Exception | None = None):
        self.next = next_claims or []
        self.fail = fail
        self.batches: list[list[tuple[bool, int]]] = []

    def submit_many(self, instance_id: str, items: list[Pending]) -> None:
        self.batches.append([(i.free, i.want) for i in items])
        for item in items:
            item.done, item.result, item.error = True, self.fail is None, self.fail
        last = items[-1]
        if self.fail is None and last.free and self.next:
            last.claim, last.more = self.next[0], self.next[1:]
            self.next = []  # handed out once


class Worker:
    """A stand-in executor: runs a claim by queuing its completion (or raising)."""

    def __init__(self, group: Group | None, *, raise_on: str = "") -> None:
        self.local = threading.local()
        self.ran: list[str] = []
        self.unrun: list[str] = []
        self.raise_on = raise_on
        self.runs = BranchRuns(
            self.local,
            run=self.run,
            node=self.node,
            group=cast(Grouper | None, group),
            unrun=lambda c: self.unrun.append(c.task.slot),
            free=lambda: getattr(self.local, "streak", 0) < STREAK,
        )

    def run(self, c: Claim, queued: list[Pending]) -> None:
        if c.task.slot == self.raise_on:
            raise RuntimeError(f"{c.task.slot} broke")
        self.ran.append(c.task.slot)
        queued.append(Pending(lambda s, v: None, free=False))

    @contextmanager
    def node(self, c: Claim) -> Iterator[Any]:
        yield None


def test_a_run_holds_what_fits_in_the_budget_and_only_with_groups() -> None:
    worker = Worker(Group())
    assert worker.runs.want() == 1  # no node ran yet
    worker.local.node_seconds = 0.00001
    assert worker.runs.want() == RUN
    worker.local.node_seconds = BUDGET / 3.5
    assert worker.runs.want() == 3
    worker.local.node_seconds = BUDGET
    assert worker.runs.want() == 1
    worker.local.node_seconds = 0.0  # a clock that did not move
    assert worker.runs.want() == RUN
    alone = Worker(None)  # a store that commits no groups
    alone.local.node_seconds = 0.00001
    assert alone.runs.want() == 1
    one = claim("b1")
    assert alone.runs.carry_on([one]) == [one]


def test_a_run_never_passes_the_streak() -> None:
    worker = Worker(Group())
    worker.local.node_seconds = 0.00001
    worker.local.streak = STREAK - 2
    assert worker.runs.want() == 2
    worker.local.streak = STREAK
    assert worker.runs.want() == 1  # and the commit is not free to take it (_free)


def test_a_run_commits_its_completions_together_and_carries_on_with_the_next() -> None:
    group = Group(next_claims=[claim("b5"), claim("b6")])
    worker = Worker(group)
    worker.local.node_seconds = 0.00001
    taken = worker.runs.carry_on([claim("b1"), claim("b2"), claim("b3")])
    # b1..b3 ran as a run, committed in one call, whose last took b5 and b6: run too,
    # then committed (taking nothing more: Group hands its claims out once).
    assert worker.ran == ["b1", "b2", "b3", "b5", "b6"]
    assert group.batches[0] == [(False, 1), (False, 1), (True, RUN)]
    assert len(group.batches) == 2
    assert taken == []
    assert worker.local.streak == 5


def test_a_run_that_raises_commits_what_ran_and_gives_back_what_did_not() -> None:
    group = Group(next_claims=[claim("b9")])
    worker = Worker(group, raise_on="b3")
    worker.local.node_seconds = 0.00001
    with pytest.raises(RuntimeError, match="b3 broke"):
        worker.runs.carry_on([claim("b1"), claim("b2"), claim("b3"), claim("b4")])
    assert worker.ran == ["b1", "b2"]
    assert worker.unrun == ["b4"]  # b3's own claim is the runner's, as for any error
    # What ran is committed, and takes nothing for a worker that stops.
    assert group.batches == [[(False, 1), (False, 1)]]


def test_a_run_whose_commit_fails_raises_its_error() -> None:
    group = Group(fail=ConnectionError("database away"))
    worker = Worker(group)
    worker.local.node_seconds = 0.00001
    with pytest.raises(ConnectionError, match="database away"):
        worker.runs.carry_on([claim("b1"), claim("b2")])
    assert worker.ran == ["b1", "b2"]
    assert worker.unrun == []


def test_one_claim_is_the_runners_to_run_next() -> None:
    worker = Worker(Group())
    only = claim("b1")
    assert worker.runs.carry_on([only]) == [only]
    assert worker.runs.carry_on([]) == []
    assert worker.ran == []  # a single claim is not a run: the runner runs it
