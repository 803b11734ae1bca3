"""Structured logs (issue 13, item 6): every runtime record carries instance id, type,
step and attempt; ``--log-format json`` writes one object a line."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from statemachine_wf import Client, Runner, Status, Store
from statemachine_wf.runtime import observe

from .flows import Twice

REPO = Path(__file__).resolve().parents[3]


def test_runtime_records_carry_the_attempt(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    client = Client(store, [Twice])
    iid = client.start(Twice, {})
    with caplog.at_level(logging.INFO, logger="statemachine_wf"):
        Runner(store, [Twice]).run_until_idle(timeout=30)
    assert client.get(iid).status == Status.COMPLETED
    runtime = [r for r in caplog.records if r.name == "statemachine_wf.runner"]
    raised = [r for r in runtime if "raised" in r.getMessage()]
    assert [(r.instance_id, r.type, r.step, r.attempt) for r in raised] == [  # type: ignore[attr-defined]
        (iid, Twice.spec().workflow_type, "first", 1)
    ]
    about = [r for r in runtime if r.getMessage().startswith(f"instance {iid}")]
    assert about
    assert {r.instance_id for r in about} == {iid}  # type: ignore[attr-defined]
    started = [r for r in runtime if "started:" in r.getMessage()]
    assert started
    assert started[0].instance_id is None  # type: ignore[attr-defined]


def test_the_json_formatter_writes_the_fields_and_redacts() -> None:
    fmt = observe.JsonFormatter()
    record = logging.LogRecord(
        "elsewhere",
        logging.WARNING,
        __file__,
        1,
        "db %s down",
        ("postgresql://u:s3cret@h/db",),
        None,
    )
    with observe.Observer().step(_Rec("i-1", "t.v1"), "charge", 2, {"charge": 2}):  # type: ignore[arg-type]
        line = json.loads(fmt.format(record))
    assert line["instance_id"] == "i-1"
    assert (line["type"], line["step"], line["attempt"]) == ("t.v1", "charge", 2)
    assert line["level"] == "WARNING"
    assert line["logger"] == "elsewhere"
    assert "s3cret" not in line["message"]


class _Rec:
    """The fields of an instance record the observer reads."""

    def __init__(self, iid: str, wtype: str) -> None:
        self.id, self.type, self.created_at, self.trace_context = iid, wtype, 0.0, None


def test_cli_log_format_json(store: Store, store_url: tuple[str, dict[str, str]]) -> None:
    client = Client(store, [Twice])
    iid = client.start(Twice, {})
    url, options = store_url
    cmd = [sys.executable, "-m", "statemachine_wf.cli", "--db", url, "--log-format", "json", "-v"]
    if "schema" in options:
        cmd += ["--schema", options["schema"]]
    cmd += ["-m", "tests.integration.observe.flows", "worker", "--until-idle"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr
    assert client.get(iid).status == Status.COMPLETED
    lines = [json.loads(line) for line in done.stderr.splitlines()]  # every line is JSON
    raised = [x for x in lines if "raised" in x["message"]]
    assert [(x["instance_id"], x["step"], x["attempt"]) for x in raised] == [(iid, "first", 1)]
    mine = [x for x in lines if x["logger"] == "observe.flows"]  # a user's record in a step
    assert [(x["instance_id"], x["type"], x["step"], x["attempt"]) for x in mine] == [
        (iid, Twice.spec().workflow_type, "second", 1)
    ]
