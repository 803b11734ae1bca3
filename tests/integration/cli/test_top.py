"""``statemachine-wf top`` on both stores: one frame as JSON and as tables, a given
number of frames, and bad settings refused with exit code 2."""

from __future__ import annotations

import json

import pytest

from statemachine_wf import Client, Runner, RunnerOptions, Store
from statemachine_wf.cli import main
from tests.unit.core.workflows import ThreeSteps


def _started(store: Store) -> Client:
    client = Client(store, [ThreeSteps])
    for n in range(3):
        client.start(ThreeSteps, {"n": n})
    Runner(store, [ThreeSteps], options=RunnerOptions(concurrency=2)).run_until_idle(timeout=60)
    client.start(ThreeSteps, {"n": 9})  # one left waiting in the queue
    client.start(ThreeSteps, {"n": 10}, delay=3600)  # and one not due for an hour
    return client


def test_one_frame_as_json(
    store: Store, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    _started(store)
    capsys.readouterr()
    assert main([*argv, "top", "--once", "--json", "--window", "600", "--bucket", "60"]) == 0
    frame = json.loads(capsys.readouterr().out)
    assert frame["statuses"] == {
        "PENDING": 2,
        "RUNNING": 0,
        "STALLED": 0,
        "COMPLETED": 3,
        "FAILED": 0,
        "CANCELLED": 0,
    }
    tp = frame["throughput"]
    assert (len(tp["started"]), len(tp["finished"])) == (10, 10)  # 600 s in 60 s buckets
    assert (sum(tp["started"]), sum(tp["finished"])) == (5, 3)
    assert tp["started_per_minute"] == 0.5
    assert tp["finished_per_minute"] == 0.3
    queue = {q["type"]: q for q in frame["queue"]}
    assert queue["test.three.v1"] == {
        "type": "test.three.v1",
        "kind": "machine",
        "ready": 1,
        "leased": 0,
        "later": 1,
    }
    assert frame["workers"] == []  # the runner ended: it holds no lease
    assert frame["dead_letters"] == {"total": 0, "waiting": 0}


def test_frames_as_tables(
    store: Store, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    _started(store)
    capsys.readouterr()
    assert main([*argv, "top", "--once"]) == 0
    text = capsys.readouterr().out
    assert "statemachine_wf top" in text
    assert "instances 5" in text
    for title in ("instances by status", "throughput, last 10 min", "queue depth", "workers"):
        assert title in text
    assert "test.three.v1" in text
    assert "(no worker holds a lease)" in text

    assert main([*argv, "top", "--iterations", "3", "--interval", "0.05"]) == 0
    assert capsys.readouterr().out.count("statemachine_wf top") == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interval", "0"], "--interval must be > 0 seconds"),
        (["--json"], "--json needs --once"),
        (["--once", "--bucket", "900"], "--bucket <= --window"),
        (["--iterations", "0"], "--iterations must be >= 1"),
    ],
)
def test_bad_settings_exit_2(
    store: Store,
    argv: list[str],
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*argv, "top", *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""
