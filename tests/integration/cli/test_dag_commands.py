"""``statemachine-wf dag ...`` on both stores: definitions saved from JSON files, listed,
shown, started and run by a worker, test runs started and stopped, and bad input refused
with exit code 2 and nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from statemachine_wf import Client, Runner, RunnerOptions, Status, Store
from statemachine_wf.cli import main
from statemachine_wf.dag import DagClient, Registry
from statemachine_wf.errors import NotFound

registry = Registry()


@registry.function("twice")
def twice(x: int) -> int:
    return x * 2


DEFINITION: dict[str, Any] = {
    "name": "cli_orders",
    "description": "doubles x",
    "nodes": [
        {"id": "s", "type": "start"},
        {
            "id": "a",
            "type": "python",
            "config": {"function": "twice", "args": {"x": "{{ctx.input.x}}"}},
        },
        {"id": "e", "type": "end", "config": {"outputs": {"a": "{{ctx.a}}"}}},
    ],
    "edges": [{"source": "s", "target": "a"}, {"source": "a", "target": "e"}],
}


def _file(tmp_path: Path, definition: Any, name: str = "orders.json") -> str:
    path = tmp_path / name
    if isinstance(definition, bytes):
        path.write_bytes(definition)
    else:
        path.write_text(definition if isinstance(definition, str) else json.dumps(definition))
    return str(path)


def _out(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().out


def _run(store: Store) -> None:
    options = RunnerOptions(concurrency=2, idle_poll=0.2)
    Runner(store, [], dags=registry, options=options).run_until_idle(timeout=60)


def test_save_list_show_and_start_a_definition_from_a_file(
    store: Store, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, DEFINITION)
    capsys.readouterr()
    assert main([*argv, "dag", "save", path]) == 0
    assert _out(capsys) == "saved cli_orders version 1\n"
    assert main([*argv, "dag", "save", path, "--json"]) == 0
    assert json.loads(_out(capsys)) == {"name": "cli_orders", "version": 2}

    assert main([*argv, "dag", "list", "--json"]) == 0
    assert json.loads(_out(capsys)) == [{"name": "cli_orders", "version": 2}]
    assert main([*argv, "dag", "list"]) == 0
    assert _out(capsys) == "cli_orders  2\n"

    assert main([*argv, "dag", "show", "cli_orders", "--version", "1", "--json"]) == 0
    shown = json.loads(_out(capsys))
    assert (shown["name"], shown["version"]) == ("cli_orders", 1)
    assert shown["definition"] == DagClient(store).definition("cli_orders", 1)[1].dump()
    assert [n["id"] for n in shown["definition"]["nodes"]] == ["s", "a", "e"]
    assert main([*argv, "dag", "show", "cli_orders"]) == 0
    text = _out(capsys)
    assert text.startswith("cli_orders  version 2  type swf.dag\n  doubles x\nnodes (3):\n")
    assert '  a  python  join=all  on_error=fail_workflow  {"args":' in text
    assert "edges (2):\n  s -> a\n  a -> e\n" in text

    assert main([*argv, "dag", "start", "cli_orders", "--input", '{"x": 21}', "--key", "k"]) == 0
    iid = _out(capsys).strip()
    assert main([*argv, "dag", "start", "cli_orders", "--input", '{"x": 21}', "--key", "k"]) == 0
    assert _out(capsys).strip() == iid  # the same key: the first run's id
    _run(store)
    dags = DagClient(store)
    assert dags.get(iid).status == Status.COMPLETED
    assert dags.output(iid) == {"a": 42}
    assert dags.history(iid)[0].payload["ref"] == {
        "name": "cli_orders",
        "version": 2,
        "test": False,
    }
    # An older version by number.
    assert main([*argv, "dag", "start", "cli_orders", "--version", "1"]) == 0
    old = _out(capsys).strip()
    assert dags.history(old)[0].payload["ref"]["version"] == 1


def test_test_runs_from_a_file_or_a_name_and_stop(
    store: Store, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, DEFINITION)
    dags = DagClient(store)
    assert main([*argv, "dag", "test-run", path, "--input", '{"x": 1}']) == 0
    from_file = _out(capsys).strip()
    assert dags.history(from_file)[0].payload["ref"]["test"] is True
    assert dags.definitions() == []  # a test run saves nothing
    dags.save(DEFINITION)
    capsys.readouterr()
    assert main([*argv, "dag", "test-run", "cli_orders", "--input", '{"x": 2}']) == 0
    by_name = _out(capsys).strip()
    _run(store)
    assert dags.output(by_name) == {"a": 4}

    assert main([*argv, "dag", "stop", from_file]) == 0
    assert _out(capsys) == f"test run {from_file} stopped and deleted\n"
    with pytest.raises(NotFound):
        dags.get(from_file, include_deleted=True)

    # A saved definition's run is not a test run: refused by name, left alone.
    run = dags.start("cli_orders", {"x": 3})
    capsys.readouterr()
    assert main([*argv, "dag", "stop", run]) == 2
    err = capsys.readouterr().err
    assert f"no test run {run!r}" in err
    assert f"statemachine-wf cancel {run}" in err
    assert dags.get(run).id == run


def test_bad_input_is_refused_by_name_with_exit_2_and_nothing_written(
    store: Store,
    argv: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    no_start = {**DEFINITION, "nodes": DEFINITION["nodes"][1:], "edges": DEFINITION["edges"][1:]}
    deep = '{"name": "d", "nodes": ' + "[" * 100 + "]" * 100 + "}"
    cases: list[tuple[list[str], str]] = [
        (["dag", "save", str(tmp_path / "missing.json")], "cannot read the DAG definition"),
        (["dag", "save", _file(tmp_path, "{not json", "bad.json")], "not JSON"),
        (["dag", "save", _file(tmp_path, no_start, "nostart.json")], "no start node"),
        (["dag", "save", _file(tmp_path, deep, "deep.json")], "nests deeper than 64 levels"),
        (["dag", "save", _file(tmp_path, b"\xff\xfe", "bin.json")], "is not UTF-8 text"),
        (["dag", "show", "nope"], "no saved DAG 'nope'"),
        (["dag", "start", "nope"], "no saved DAG 'nope'"),
        (["dag", "test-run", "nope"], "nope is neither a file nor a saved DAG"),
        (["dag", "test-run", "./missing.json"], "no such file: ./missing.json"),
        (["dag", "test-run", _file(tmp_path, DEFINITION), "--input", "[1]"], "JSON object"),
        (["dag", "test-run", _file(tmp_path, DEFINITION), "--input", "{x"], "--input is not JSON"),
        (["dag", "stop", "no-such-run"], "instance_id must be a UUID"),
    ]
    for args, message in cases:
        capsys.readouterr()
        assert main([*argv, *args]) == 2, args
        err = capsys.readouterr().err
        assert message in err, (args, err)
        assert "Traceback" not in err
    monkeypatch.setenv("SWF_MAX_DAG_BYTES", "100")
    assert main([*argv, "dag", "save", _file(tmp_path, DEFINITION)]) == 2
    assert "over the DAG definition size limit of 100 bytes" in capsys.readouterr().err
    dags = DagClient(store)
    assert dags.definitions() == []
    assert Client(store).count() == 0
