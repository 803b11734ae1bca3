"""A wait's token (the secret of an approval link) is not shown by ``history`` nor by the
dashboard's instance page: like ``signals``, they show only whether there is one
(``"tokened": true``), on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel
from starlette.testclient import TestClient

from statemachine_wf import (
    COMPLETED,
    Client,
    Runner,
    RunnerOptions,
    StepContext,
    Store,
    Workflow,
    step,
)
from statemachine_wf.cli import main
from statemachine_wf.dashboard.app import create_app
from statemachine_wf.definition.events import Ev
from tests.integration.cli.test_json_and_tables import _on_a_terminal


class Nothing(BaseModel):
    pass


class Reply(BaseModel):
    reply: object = None


class Asks(Workflow[Nothing, Reply]):
    """Reserves its wait's token (WAIT_TOKEN), keeps it to itself, and waits (STEP_WAITING)."""

    workflow_type = "test.asks.v1"

    @step(initial=True, to=COMPLETED, signals=["reply"])
    def ask(self, ctx: StepContext[Nothing, Reply]) -> str:
        assert ctx.wait_token  # handed out (say, in a mail), never saved in progress
        ctx.set(reply=ctx.wait_for("reply"))
        return COMPLETED


def _waiting(store: Store) -> tuple[str, str]:
    """An instance waiting with a token, and the token."""
    client = Client(store, [Asks])
    instance_id = client.start(Asks, {})
    Runner(store, [Asks], options=RunnerOptions(concurrency=1)).run_until_idle(timeout=60)
    wait = client.get(instance_id).wait
    assert wait is not None
    token = str(wait["token"])
    assert len(token) >= 16
    types = [e.event_type for e in store.events(instance_id)]
    assert Ev.WAIT_TOKEN in types
    assert Ev.STEP_WAITING in types
    return instance_id, token


def test_history_shows_whether_a_wait_has_a_token_not_the_token(
    store: Store, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    instance_id, token = _waiting(store)
    capsys.readouterr()
    assert main([*argv, "history", instance_id]) == 0
    lines = capsys.readouterr().out
    assert token not in lines
    assert '"tokened": true' in lines
    # --lifecycle names the lifecycle's events: the wait, not the token's reservation.
    for flags, shown in ((["--json"], 2), (["--lifecycle", "--json"], 1)):
        assert main([*argv, "history", instance_id, *flags]) == 0
        text = capsys.readouterr().out
        assert token not in text
        events = json.loads(text)
        waits = [e for e in events if e["event_type"] in (Ev.WAIT_TOKEN, Ev.STEP_WAITING)]
        assert len(waits) == shown
        assert all(e["payload"]["tokened"] is True for e in waits)
        assert all("token" not in e["payload"] for e in waits)
        # the rest of the payload is shown as it is
        assert {e["payload"]["wait"] for e in waits} == {"0"}
    table = _on_a_terminal(argv, "history", instance_id, columns=400)
    assert token not in table
    assert '"tokened": true' in table


def test_dashboard_instance_page_hides_the_wait_token(store: Store) -> None:
    instance_id, token = _waiting(store)
    with TestClient(create_app(store, workflows=[Asks])) as web:
        page = web.get(f"/instances/{instance_id}")
    assert page.status_code == 200
    assert "WAIT_TOKEN" in page.text
    assert "STEP_WAITING" in page.text
    assert token not in page.text
    assert "tokened" in page.text


def test_status_and_list_show_the_wait_without_its_token(
    store: Store, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    instance_id, token = _waiting(store)
    capsys.readouterr()
    for command in (["status", instance_id, "--json"], ["list", "--json"]):
        assert main([*argv, *command]) == 0
        text = capsys.readouterr().out
        assert token not in text
        shown = json.loads(text)
        record = (
            shown if isinstance(shown, dict) else next(r for r in shown if r["id"] == instance_id)
        )
        assert record["waiting"]["tokened"] is True
        assert "token" not in record["waiting"]
        assert record["waiting"]["name"] == "reply"  # the rest of the wait as it is
