"""Runner hardening (issue 9 items 1, 3, 4, 5, 9): options, kinds, twins, lost leases.

Every test runs on SQLite and on the real PostgreSQL server (the ``store`` fixture).
"""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    InputError,
    Runner,
    RunnerOptions,
    Status,
    StepContext,
    Store,
    Workflow,
    step,
)
from statemachine_wf.cli import main
from statemachine_wf.client.dag import DagClient
from statemachine_wf.core.store import Commit
from statemachine_wf.definition.events import Ev
from statemachine_wf.errors import StoreUnavailable, TypeKindConflict
from statemachine_wf.runtime.dag_handlers import Registry
from tests.integration.dag.helpers import linear

from ..core.test_poison import raw
from ..crash.harness import poll_until


class PayIn(BaseModel):
    amount: int = 0


class Pay(Workflow[PayIn, BaseModel]):
    """A payments workflow: each run of ``go`` is a payment (counted in ``paid``)."""

    workflow_type = "t.hardening.pay.v1"
    paid: list[int]
    gate: threading.Event | None

    @step(initial=True, to=COMPLETED)
    def go(self, ctx: StepContext[PayIn, BaseModel]) -> None:
        self.paid.append(ctx.input.amount)
        if self.gate is not None and len(self.paid) == 1:
            self.gate.wait(30)  # only the first run waits: the test opens the gate


def deps(gate: threading.Event | None = None) -> dict[str, Any]:
    return {"paid": [], "gate": gate}


# -- item 9: runner options ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("lease", 0),
        ("lease", -1.0),
        ("lease", math.nan),
        ("lease", math.inf),
        ("lease", 1e12),
        ("lease", "30"),
        ("concurrency", 0),
        ("concurrency", -3),
        ("concurrency", 2.5),
        ("concurrency", True),
        ("idle_poll", 0),
        ("idle_poll", math.nan),
        ("heartbeat_log_every", -1),
        ("prefixes", "billing."),
        ("prefixes", ("",)),
        ("prefixes", (1,)),
        ("dag_types", "swf.dag"),
        ("worker_id", ""),
        ("worker_id", "a\nb"),
        ("reconcile_on_start", "yes"),
    ],
)
def test_every_runner_option_is_validated_and_named(option: str, value: Any) -> None:
    with pytest.raises(InputError, match=option):
        RunnerOptions(**{option: value})


def test_a_lease_of_zero_never_reaches_the_store(store: Store) -> None:
    client = Client(store, [Pay])
    i = client.start(Pay, PayIn(amount=1))
    with pytest.raises(InputError, match=r"lease must be a finite number of seconds in \[0.1"):
        Runner(store, [Pay], options=RunnerOptions(lease=0), dependencies=deps())
    task = store.task(i)
    assert task is not None
    assert task.lease_owner is None
    assert [e.event_type for e in client.history(i)] == [Ev.CREATED]


def test_cli_worker_lease_zero_exits_2_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'w.db'}"
    code = main(["--db", db, "-m", __name__, "worker", "--lease", "0", "--until-idle"])
    assert code == 2
    assert "lease must be" in capsys.readouterr().err


# -- item 3: kinds --------------------------------------------------------------------------
def test_a_dag_named_after_a_state_machine_never_runs_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.migrate()
    # A DAG row whose type is the state machine's (as a producer could write it); the
    # client check is bypassed here to test the store's claim filter.
    monkeypatch.setattr(DagClient, "_check_type", lambda self, t: None, raising=False)
    evil = linear().model_copy(update={"type": Pay.workflow_type})
    iid = DagClient(store).start(evil, {"x": 1000000})
    d = deps()
    Runner(
        store, [Pay], options=RunnerOptions(concurrency=1, idle_poll=0.2), dependencies=d
    ).run_until_idle(timeout=20)
    assert d["paid"] == []  # before the fix: Pay.go ran with the DAG author's input
    record = Client(store).get(iid)
    assert record.kind == "dag"
    assert record.status == Status.RUNNING  # left for a DAG runner of that type


def test_dag_start_refuses_a_state_machine_type(store: Store) -> None:
    store.migrate()
    store.register_types([Pay.workflow_type], by="test")
    evil = linear().model_copy(update={"type": Pay.workflow_type})
    with pytest.raises(TypeKindConflict, match="registered as a state-machine type"):
        DagClient(store).start(evil, {"x": 1})
    assert store.list_instances() == []


def test_a_type_is_one_kind_only_in_the_database(store: Store) -> None:
    store.migrate()
    store.register_types([Pay.workflow_type], by="test")
    store.register_types(["orders.dag"], by="test", kind="dag")
    with pytest.raises(TypeKindConflict, match="registered as a state-machine type"):
        store.register_types(["orders.dag2", Pay.workflow_type], by="test", kind="dag")
    with pytest.raises(TypeKindConflict, match="registered as a DAG type"):
        store.register_types(["orders.dag"], by="test")
    assert store.registered_types() == [Pay.workflow_type]
    assert store.registered_types("dag") == ["orders.dag"]  # nothing written by the refusals
    # Past the store's check (a producer writing SQL): the database itself refuses.
    with pytest.raises(Exception, match="registered as a DAG type"):
        raw(
            store,
            "INSERT INTO wf_types (type, registered_by, updated_at) VALUES (%s, 'sql', 0)"
            if store.dialect == "sqlite"
            else "INSERT INTO wf_types (type, registered_by) VALUES (%s, 'sql')",
            ("orders.dag",),
        )
    with pytest.raises(Exception, match="registered as a state-machine type"):
        raw(
            store,
            "INSERT INTO wf_dag_types (type, registered_by, updated_at) VALUES (%s, 'sql', 0)"
            if store.dialect == "sqlite"
            else "INSERT INTO wf_dag_types (type, registered_by) VALUES (%s, 'sql')",
            (Pay.workflow_type,),
        )


def test_a_runner_refuses_to_host_a_dag_type_that_is_a_state_machine_type(store: Store) -> None:
    store.migrate()
    store.register_types([Pay.workflow_type], by="another runner")
    runner = Runner(
        store, [], dags=Registry(), options=RunnerOptions(dag_types=(Pay.workflow_type,))
    )
    with pytest.raises(TypeKindConflict, match=repr(Pay.workflow_type)):
        runner.start()
    runner.stop()


def test_status_says_when_no_runner_hosts_a_dag_type(
    store: Store,
    store_url: tuple[str, dict[str, str]],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    store.migrate()
    lonely = linear().model_copy(update={"type": "nobody.hosts.this"})
    with caplog.at_level(logging.WARNING):
        iid = DagClient(store).start(lonely, {"x": 1})
    assert "no runner has registered the DAG type 'nobody.hosts.this'" in caplog.text
    url, extra = store_url
    args = ["--db", url] + (["--schema", extra["schema"]] if "schema" in extra else [])
    assert main([*args, "status", iid]) == 0
    out = capsys.readouterr().out
    assert "no runner has registered the DAG type 'nobody.hosts.this'" in out
    store.register_types(["nobody.hosts.this"], by="test", kind="dag")
    assert main([*args, "status", iid]) == 0
    assert "no runner has registered" not in capsys.readouterr().out


def test_a_task_the_runner_cannot_run_is_dead_lettered_with_the_reason(
    store: Store, capsys: pytest.CaptureFixture[str], store_url: tuple[str, dict[str, str]]
) -> None:
    store.migrate()
    iid = DagClient(store).start(linear(), {"x": 1})
    runner = Runner(store, [Pay], dependencies=deps())  # hosts no DAGs
    [claim] = store.dag_claim(worker=runner.worker_id, types=["swf.dag"], lease=30)
    runner._run_claim(claim, startup=False)
    record = Client(store).get(iid)
    assert record.status == Status.STALLED
    assert record.error is not None
    assert "cannot run a dag task" in record.error["message"]
    (letter,) = [d for d in Client(store).dead_letters() if d["instance_id"] == iid]
    assert "cannot run a dag task of type 'swf.dag'" in letter["reason"]
    url, extra = store_url
    args = ["--db", url] + (["--schema", extra["schema"]] if "schema" in extra else [])
    assert main([*args, "status", iid]) == 0
    assert "cannot run a dag task" in capsys.readouterr().out


# -- item 4: twins (in one process; two processes: tests/integration/crash) ------------------
def test_heartbeat_and_release_are_fenced_by_the_incarnation(store: Store) -> None:
    client = Client(store, [Pay])
    i = client.start(Pay, PayIn())
    [claim] = store.claim(worker="w", types=[Pay.workflow_type], lease=30, incarnation="h:1:a")
    assert claim.task.lease_token is not None
    assert claim.task.lease_token.startswith("h:1:a/")
    assert store.heartbeat(worker="w", lease=30, incarnation="h:2:b") == 0  # a twin's beat
    assert store.heartbeat(worker="w", lease=30, incarnation="h:1:a") == 1
    assert store.lease_incarnations(worker="w") == ["h:1:a"]
    store.release(worker="w", instance_ids=[i], incarnation="h:2:b")  # not the twin's
    store.release(worker="w", instance_ids=[i], token="h:1:a/other")  # not that claim
    assert store.claim(worker="x", types=[Pay.workflow_type], lease=30) == []
    store.release(worker="w", instance_ids=[i], token=claim.task.lease_token)
    [again] = store.claim(worker="x", types=[Pay.workflow_type], lease=30)
    assert again.instance.id == i


def test_a_twin_starting_up_does_not_take_a_live_runners_lease(store: Store) -> None:
    client = Client(store, [Pay])
    i = client.start(Pay, PayIn(amount=5))
    gate = threading.Event()
    d = deps(gate)
    opts = RunnerOptions(concurrency=1, worker_id="twin", idle_poll=0.2)
    first = Runner(store, [Pay], options=opts, dependencies=d)
    second = Runner(store, [Pay], options=opts, dependencies=d)
    first.start()
    try:
        poll_until(lambda: len(d["paid"]) == 1, timeout=20, what="the first run")
        second.start()  # its start-up release must leave the first one's lease alone
        assert second.store.lease_incarnations(worker="twin") == [first.incarnation]
        gate.set()
        poll_until(lambda: client.get(i).status == Status.COMPLETED, timeout=20, what="completion")
    finally:
        gate.set()
        first.stop()
        second.stop()
    assert d["paid"] == [5]  # before the fix: [5, 5]
    completed = [e for e in client.history(i) if e.event_type == Ev.STEP_COMPLETED]
    assert len(completed) == 1


# -- item 5: a lease lost under a long action ------------------------------------------------
def test_a_lost_lease_fences_the_completion_and_says_so(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    client = Client(store, [Pay])
    i = client.start(Pay, PayIn(amount=7))
    gate = threading.Event()
    d = deps(gate)
    slow = Runner(store, [Pay], options=RunnerOptions(concurrency=1, lease=0.3), dependencies=d)
    slow._extend_leases = lambda: 0  # type: ignore[method-assign]  # the heartbeat starved
    other = Runner(
        store, [Pay], options=RunnerOptions(concurrency=1, idle_poll=0.1), dependencies=d
    )
    caplog.set_level(logging.WARNING, logger="statemachine_wf.runner")
    slow.start()
    try:
        poll_until(lambda: len(d["paid"]) == 1, timeout=20, what="the slow run")
        other.start()  # takes the instance over once the unextended lease lapses
        poll_until(lambda: client.get(i).status == Status.COMPLETED, timeout=20, what="done")
        gate.set()  # the slow action returns now: its completion must be refused
        poll_until(
            lambda: any(
                "lease lost" in r.getMessage() and i in r.getMessage() for r in caplog.records
            ),
            timeout=20,
            what="the lost lease logged",
        )
    finally:
        gate.set()
        slow.stop()
        other.stop()
    assert d["paid"] == [7, 7]  # the action ran twice (the lease lapsed) ...
    kinds = [e.event_type for e in client.history(i)]
    assert kinds.count(Ev.STEP_COMPLETED) == 1  # ... its outcome was written once
    assert kinds.count(Ev.COMPLETED) == 1
    assert client.verify(i) == {}


# -- item 1 (rest): a hand-back backs off before claiming again -------------------------------
def test_a_hand_back_backs_off_before_claiming_again(store: Store) -> None:
    client = Client(store, [Pay])
    client.start(Pay, PayIn(amount=1))
    runner = Runner(store, [Pay], options=RunnerOptions(concurrency=1), dependencies=deps())
    [claim] = store.claim(
        worker=runner.worker_id, types=[Pay.workflow_type], lease=30, incarnation=runner.incarnation
    )
    waits: list[float] = []

    class Stopping(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(0.0 if timeout is None else timeout)
            return False

    runner._stopping = Stopping()

    def unavailable(commit: Commit, **kwargs: Any) -> int:
        raise StoreUnavailable("injected: the database went away", lost=True)

    # Pay has one step: its commit is a finish, which also claims (apply_and_claim).
    runner.store = runner.driver.store = _Proxy(
        store, apply=unavailable, apply_and_claim=unavailable
    )
    runner._run_claim(claim, startup=False)
    assert waits
    assert 0.5 <= waits[-1] <= 1.5
    task = store.task(claim.instance.id)
    assert task is not None
    assert task.lease_owner is None


class _Proxy:
    def __init__(self, inner: Store, **overrides: Any) -> None:
        self._inner = inner
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        return self._overrides.get(name) or getattr(self._inner, name)
