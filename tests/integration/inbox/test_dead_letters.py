"""Dead letters on both stores: every poison case lands there with the original envelope,
the reason, the runner id and the time; list/show/redrive from Python and the CLI;
a redrive marks the letter (kept, not deleted) and a second redrive does nothing."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

import pytest
from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    InvalidState,
    Status,
    StepContext,
    Store,
    UnknownWorkflowType,
    Workflow,
    step,
)
from statemachine_wf.cli import main
from statemachine_wf.definition.events import Ev

from .flows import Broken, Echo, run_all


def raw_sql(store_url: tuple[str, dict[str, str]], statement: str, *params: Any) -> Any:
    """Run one statement on the store's database, outside the SDK (a foreign producer, or
    an operator breaking a row on purpose); return the first column of the first row."""
    url, options = store_url
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            row = conn.execute(statement.replace("%s", "?"), params).fetchone()
        return None if row is None else row[0]
    import psycopg

    with psycopg.connect(
        url, autocommit=True, options=f"-c search_path={options['schema']}"
    ) as conn:
        cur = conn.execute(statement, params)
        row = cur.fetchone() if cur.description else None
        return None if row is None else row[0]


def sql_start(store_url: tuple[str, dict[str, str]], type_name: str, payload: str) -> None:
    """The documented one-statement SQL start, in each dialect."""
    if store_url[0].startswith("sqlite"):
        raw_sql(store_url, "INSERT INTO wf_start (type, input) VALUES (%s, %s)", type_name, payload)
    else:
        raw_sql(store_url, "SELECT swf_start(%s, %s::jsonb)", type_name, payload)


def cli(store_url: tuple[str, dict[str, str]], *args: str) -> None:
    url, options = store_url
    argv = ["--db", url, *(["--schema", options["schema"]] if options else [])]
    argv += ["-m", "tests.integration.inbox.flows", *args]
    assert main(argv) == 0


def test_retries_exhausted_dead_letter_and_redrive(
    store: Store, store_url: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    client = Client(store, [Broken])
    before = time.time()
    i = client.start(Broken, {"n": 3}, idempotency_key="broken-1", priority=7)
    run_all(store, [Broken], worker_id="runner-a")
    assert client.status(i) == Status.FAILED
    [letter] = client.dead_letters()
    assert letter["instance_id"] == i
    assert letter["worker"] == "runner-a"
    assert letter["created_at"] >= before - 1
    assert "retries exhausted after 2 failures: the bank is down" in letter["reason"]
    env = letter["envelope"]
    assert (env["type"], env["input"], env["idempotency_key"], env["priority"]) == (
        "inbox.broken.v1",
        {"n": 3, "note": ""},
        "broken-1",
        7,
    )
    assert env["status"] == "FAILED"
    assert env["step"] == "act"
    history = [e.event_type for e in client.history(i)]
    assert history.count(Ev.DEAD_LETTERED) == 1
    assert history.index(Ev.DEAD_LETTERED) == len(history) - 1
    assert client.verify(i) == {}

    # CLI: list, show, redrive (the instance is retried, fails again: a second letter).
    cli(store_url, "dead-letters")
    listed = capsys.readouterr().out
    assert f"{letter['id']:>6}" in listed
    assert "retries exhausted" in listed
    cli(store_url, "dead-letters", "show", str(letter["id"]))
    shown = json.loads(capsys.readouterr().out)
    assert shown["envelope"] == env
    cli(store_url, "dead-letters", "redrive", str(letter["id"]))
    assert f"dead letter {letter['id']}: retried  instance {i}" in capsys.readouterr().out
    marked = client.dead_letter(letter["id"])
    assert marked["redriven_at"] is not None
    assert marked["redrive_instance_id"] == i
    assert client.status(i) == Status.RUNNING  # due again
    run_all(store, [Broken])
    assert client.status(i) == Status.FAILED
    assert len(client.dead_letters()) == 2  # the redriven one is kept

    events = len(client.history(i))
    again = client.redrive(letter["id"])
    assert again.action == "already"
    assert len(client.history(i)) == events  # harmless: nothing written
    assert len(client.dead_letters()) == 2


def test_unknown_type_from_sql_is_dead_lettered_then_redriven(
    store: Store, store_url: tuple[str, dict[str, str]]
) -> None:
    sql_start(store_url, "inbox.echo.v1", '{"n": 5}')
    assert store.list_instances() == []  # no runner ever registered inbox.echo.v1
    [letter] = store.dead_letters()
    assert letter["instance_id"] is None
    assert letter["reason"].startswith("unknown workflow type 'inbox.echo.v1'")
    assert letter["envelope"]["input"] == {"n": 5}

    client = Client(store)  # knows no classes: the registry decides
    with pytest.raises(UnknownWorkflowType, match=r"unknown workflow type 'inbox\.echo\.v1'"):
        client.redrive(letter["id"])
    assert client.dead_letter(letter["id"])["redriven_at"] is None  # nothing changed

    store.register_types(["inbox.echo.v1"], by="deploy")
    first = client.redrive(letter["id"])
    assert first.action == "started"
    assert first.instance_id is not None
    assert client.redrive(letter["id"]).instance_id == first.instance_id
    run_all(store, [Echo])
    done = client.get(first.instance_id)
    assert done.status == Status.COMPLETED
    assert done.progress == {"doubled": 10}
    assert len(store.list_instances()) == 1


def test_corrupt_row_is_dead_lettered_on_both_stores_and_redriven(
    store: Store, store_url: tuple[str, dict[str, str]]
) -> None:
    client = Client(store, [Echo])
    bad = client.start(Echo, {"n": 1})
    good = client.start(Echo, {"n": 2})
    raw_sql(store_url, "UPDATE wf_instances SET status = 'BOGUS' WHERE id = %s", bad)
    run_all(store, [Echo], worker_id="runner-q")
    assert client.status(good) == Status.COMPLETED
    [letter] = client.dead_letters()
    assert letter["instance_id"] == bad
    assert letter["worker"] == "runner-q"
    assert "corrupt row" in letter["reason"]
    assert "BOGUS" in letter["reason"]
    assert client.status(bad) == Status.STALLED  # set aside, not retried in a loop

    assert client.redrive(letter["id"]).action == "resumed"
    run_all(store, [Echo])
    assert client.get(bad).status == Status.COMPLETED


def test_missing_step_definition_is_dead_lettered(store: Store) -> None:
    class Old(BaseModel):
        n: int | None = None

    class V1(Workflow[Old, Old]):
        workflow_type = "inbox.changed.v1"

        @step(initial=True, to="gone")
        def first(self, ctx: StepContext[Old, Old]) -> str:
            return "gone"

        @step(to=COMPLETED)
        def gone(self, ctx: StepContext[Old, Old]) -> None:
            raise AssertionError("held back by the test")

    class V1Changed(Workflow[Old, Old]):  # the same type, its step renamed: not allowed
        workflow_type = "inbox.changed.v1"

        @step(initial=True, to="renamed")
        def first(self, ctx: StepContext[Old, Old]) -> str:
            return "renamed"

        @step(to=COMPLETED)
        def renamed(self, ctx: StepContext[Old, Old]) -> None: ...

    client = Client(store, [V1])
    i = client.start(V1, {"n": 1})
    claim = store.claim(worker="w", types=["inbox.changed.v1"], lease=30)[0]
    from statemachine_wf.core import decide
    from statemachine_wf.core.store import Commit

    state = claim.instance.projection(in_flight=True)
    decision = decide.success(V1.spec(), state, "first", 1, "gone", {}, hold=False)
    store.apply(Commit(i, claim.instance.version, decision, "w"))
    run_all(store, [V1Changed], worker_id="runner-new")
    [letter] = client.dead_letters()
    assert letter["reason"] == "missing definition: inbox.changed.v1 has no step 'gone'"
    assert letter["worker"] == "runner-new"
    assert client.status(i) == Status.STALLED
    # A start-up pass (which takes STALLED instances to reconcile them) leaves a
    # quarantined one alone: it listed the instance before another thread quarantined
    # it, and once wrote a second letter for it.
    assert store.claim_instance(i, worker="runner-restarted", lease=30) is None
    run_all(store, [V1Changed], worker_id="runner-restarted")
    assert len(client.dead_letters()) == 1


def test_redrive_of_unknown_letter_is_not_found(store: Store) -> None:
    from statemachine_wf import NotFound

    with pytest.raises(NotFound, match="no dead letter 4242"):
        Client(store).redrive(4242)


def test_dag_node_retries_exhausted_is_dead_lettered(store: Store) -> None:
    from statemachine_wf.dag import DagClient
    from tests.integration.dag import helpers as h

    client = DagClient(store)
    with h.running(store):
        iid = client.start(h.error_fail(), {})
        record = client.wait(iid, timeout=30)
    assert record.status == Status.FAILED
    [letter] = store.dead_letters()
    assert letter["instance_id"] == iid
    assert letter["reason"] == "node 'a': retries exhausted after 3 failures: always"
    assert letter["envelope"]["kind"] == "dag"
    assert letter["envelope"]["status"] == "FAILED"
    assert [e.event_type for e in client.history(iid)].count(Ev.DEAD_LETTERED) == 1
    with pytest.raises(InvalidState, match="only state machines can be retried in place"):
        Client(store).redrive(letter["id"])
    assert store.dead_letters()[0]["redriven_at"] is None


def test_sql_started_row_quarantined_before_its_first_step_is_redriven(
    store: Store, store_url: tuple[str, dict[str, str]]
) -> None:
    store.register_types(["inbox.echo.v1"], by="test")
    sql_start(store_url, "inbox.echo.v1", '{"n": 6}')
    [row] = store.list_instances()
    assert row.step is None  # the sentinel: no step until a runner claims it
    store.quarantine(row.id, reason="corrupt row: by hand", worker="op")
    [letter] = store.dead_letters()
    assert Client(store).redrive(letter["id"]).action == "resumed"
    run_all(store, [Echo])
    done = Client(store).get(row.id)
    assert done.status == Status.COMPLETED
    assert done.progress == {"doubled": 12}
