"""Poison values (issue 9, items 1, 2, 10, 12), on SQLite and PostgreSQL.

Deep JSON is refused at every entry point (the Python API with an InputError naming the
field and the depth, the SQL contract's triggers); a row already stored too deep to decode
is quarantined with a dead letter and never blocks other rows or the read commands; both
stores refuse the same values (NUL, lone surrogates, NaN) with the same error; a
``wf_signals`` row of kind ``timer`` passes the same checks as a signal; a schema newer
than the code is refused.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
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
from statemachine_wf.definition.limits import MAX_JSON_DEPTH, value_problem
from statemachine_wf.errors import DataRejected, SchemaTooNew
from statemachine_wf.stores._common import Undecodable, dumps

DEEP_TEXT = "[" * 3000 + "1" + "]" * 3000  # far past Python's decoder (about 1,000)


def nested(depth: int, leaf: Any = 1) -> Any:
    """A list nested ``depth`` levels deep (built without recursion)."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


class In(BaseModel):
    data: Any = None


class Out(BaseModel):
    kept: Any = None


class Counted(Workflow[In, Out]):
    """A valid workflow whose side effect is counted: it must run exactly once."""

    workflow_type = "t.poison.counted.v1"
    effects: list[str]
    guard: threading.Lock

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, Out]) -> None:
        with self.guard:
            self.effects.append(ctx.instance_id)


class Keeps(Workflow[In, Out]):
    """Stores what it is given in progress."""

    workflow_type = "t.poison.keeps.v1"

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, Out]) -> None:
        ctx.set(kept=ctx.input.data)


class Waits(Workflow[In, Out]):
    """Waits for signal ``go`` and keeps its payload."""

    workflow_type = "t.poison.waits.v1"

    @step(initial=True, to=COMPLETED, signals=["go"])
    def only(self, ctx: StepContext[In, Out]) -> None:
        got = ctx.wait_for("go", timeout=3600)
        ctx.set(kept=got)


ALL = [Counted, Keeps, Waits]


def deps() -> dict[str, Any]:
    return {"effects": [], "guard": threading.Lock()}


def run(store: Store, dependencies: dict[str, Any]) -> None:
    Runner(
        store, ALL, dependencies=dependencies, options=RunnerOptions(concurrency=2)
    ).run_until_idle(timeout=15)


def raw(store: Store, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Run one SQL statement as an outside producer would (its own connection)."""
    if store.dialect == "sqlite":
        conn = sqlite3.connect(store.path)  # type: ignore[attr-defined]
        try:
            rows = conn.execute(statement.replace("%s", "?"), params).fetchall()
            conn.commit()
            return rows
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(
        store.url,  # type: ignore[attr-defined]
        autocommit=True,
        options=f"-c search_path={store.schema}",  # type: ignore[attr-defined]
    ) as pg:
        cur = pg.execute(statement.encode(), params)
        return cur.fetchall() if cur.description else []


def sql_start(store: Store, type_name: str, input_text: str) -> None:
    if store.dialect == "sqlite":
        raw(store, "INSERT INTO wf_start (type, input) VALUES (%s, %s)", (type_name, input_text))
    else:
        raw(store, "SELECT swf_start(%s, %s::jsonb)", (type_name, input_text))


def sql_signal(store: Store, instance_id: str, payload: str, kind: str = "signal") -> None:
    raw(
        store,
        "INSERT INTO wf_signals (instance_id, kind, name, payload) VALUES (%s, %s, 'go', %s)",
        (instance_id, kind, payload),
    )


def refused(store: Store, statement: str, params: tuple[Any, ...]) -> str:
    with pytest.raises(Exception, match=r"wf_s") as info:  # the trigger names its table
        raw(store, statement, params)
    return str(info.value)


# -- the shared check ------------------------------------------------------------------------
def test_value_problem_names_the_path_and_the_problem() -> None:
    assert value_problem({"a": [1, "x", 2.5, None, True]}) is None
    assert value_problem(nested(MAX_JSON_DEPTH)) is None
    path, problem = value_problem({"a": nested(MAX_JSON_DEPTH)})  # type: ignore[misc]
    assert path.startswith("$.a[0]")
    assert "deeper than 64 levels" in problem
    assert value_problem({"a": ["ok", "b\x00"]}) == (
        "$.a[1]",
        "contains a NUL character (\\u0000), which PostgreSQL cannot store",
    )
    assert value_problem({"k\ud800": 1})[1].startswith("has a key that contains a lone")  # type: ignore[index]
    assert value_problem({"n": float("nan")}) == ("$.n", "is nan, which is not a JSON number")
    assert value_problem({"n": float("-inf")})[0] == "$.n"  # type: ignore[index]
    assert value_problem(nested(100_000)) is not None  # no recursion


def test_both_stores_encode_through_one_check_with_one_error() -> None:
    from statemachine_wf.stores._pgconn import _jsonb  # what PostgresStore encodes with

    for bad in ({"s": "a\x00"}, {"s": "\udc80"}, {"f": float("nan")}, nested(90)):
        with pytest.raises(DataRejected) as sqlite_side:
            dumps(bad)
        with pytest.raises(DataRejected) as pg_side:
            _jsonb(bad)
        assert str(sqlite_side.value) == str(pg_side.value)
        assert str(sqlite_side.value).startswith("value refused: $")
    assert dumps({"s": "a\\u0000 is only text"}) == '{"s":"a\\\\u0000 is only text"}'


# -- the Python API ---------------------------------------------------------------------------
def test_start_refuses_deep_nul_surrogate_and_nan_input_naming_the_field(store: Store) -> None:
    client = Client(store, ALL)
    cases = [
        ({"data": nested(65)}, "input.data[0]", "nests deeper than 64 levels"),
        ({"data": nested(5000)}, "input.data[0]", "nests deeper than 64 levels"),
        ({"data": {"note": "a\x00b"}}, "input.data.note", "NUL"),
        ({"data": ["\ud800"]}, "input.data[0]", "lone surrogate"),
        ({"data": float("nan")}, "input.data", "nan"),
        ({"data": {"x": float("inf")}}, "input.data", ""),
    ]
    for data, where, what in cases:
        with pytest.raises(InputError) as info:
            client.start(Keeps, data)
        assert str(info.value).startswith(where), str(info.value)[:200]
        assert what in str(info.value)
        with pytest.raises(InputError):
            client.start_many(Keeps, [{"data": 1}, data])
    assert store.list_instances() == []
    client.start(Keeps, {"data": nested(MAX_JSON_DEPTH - 1)})  # the limit itself is fine


def test_signal_refuses_deep_payloads_with_input_error_not_recursion_error(store: Store) -> None:
    client = Client(store, ALL)
    i = client.start(Waits, {})
    for payload in (nested(65), nested(1500), nested(50_000), {"a": "\x00"}, [float("nan")]):
        with pytest.raises(InputError) as info:
            client.signal(i, "go", payload)
        assert "signal 'go' payload" in str(info.value)
    assert store.signals() == []


def test_dag_start_refuses_a_deep_input(store: Store) -> None:
    from statemachine_wf.dag import DagClient
    from tests.integration.dag.helpers import linear

    with pytest.raises(InputError) as info:
        DagClient(store).start(linear(1), {"x": nested(80)})
    assert str(info.value).startswith("input.x[0]")
    assert "nests deeper than 64 levels" in str(info.value)
    assert store.list_instances() == []


class Deepens(Workflow[In, Out]):
    """Sets a progress field nested past the limit."""

    workflow_type = "t.poison.deepens.v1"

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[In, Out]) -> None:
        ctx.set(kept=nested(100))


def test_ctx_set_refuses_a_deep_value_naming_the_field(store: Store) -> None:
    client = Client(store, [Deepens])
    i = client.start(Deepens, {})
    Runner(store, [Deepens]).run_until_idle(timeout=10)
    record = client.get(i)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert "progress.kept[0]" in record.error["message"]
    assert "nests deeper than 64 levels" in record.error["message"]


# -- the SQL contract -------------------------------------------------------------------------
def test_sql_start_refuses_deep_input_and_keeps_the_limit(store: Store) -> None:
    store.register_types([Keeps.spec().workflow_type], by="test")
    for depth in (65, 1500):
        message = refused(
            store,
            "INSERT INTO wf_start (type, input) VALUES (%s, %s)"
            if store.dialect == "sqlite"
            else "SELECT swf_start(%s, %s::jsonb)",
            (Keeps.spec().workflow_type, json.dumps({"data": nested(depth)})),
        )
        assert "nests deeper than 64 levels" in message
    assert store.list_instances() == []
    assert store.dead_letters() == []
    sql_start(store, Keeps.spec().workflow_type, json.dumps({"data": nested(63)}))
    (row,) = store.list_instances()
    run(store, deps())
    assert store.get(row.id).status == Status.COMPLETED  # type: ignore[union-attr]


def test_sql_start_refuses_a_nul_on_both_stores(store: Store) -> None:
    store.register_types([Keeps.spec().workflow_type], by="test")
    with pytest.raises(Exception, match=r"(?i)nul|u0000|unsupported"):
        sql_start(store, Keeps.spec().workflow_type, '{"data": "a\\u0000b"}')
    assert store.list_instances() == []


def test_an_instance_of_a_kind_nobody_runs_is_refused_by_the_database(store: Store) -> None:
    # Migration 012: shown but never run, so never written (a kind the runtime knows).
    good = Client(store, ALL).start(Keeps, {"data": 1})
    with pytest.raises(Exception, match=r"kind") as info:
        raw(store, "UPDATE wf_instances SET kind = 'bogus' WHERE id = %s", (good,))
    assert "wf_instances" in str(info.value)
    assert store.get(good).kind == "machine"  # type: ignore[union-attr]
    with pytest.raises(Exception, match=r"kind"):
        raw(
            store,
            "INSERT INTO wf_instances (id, type, kind, status, input, created_at, updated_at)"
            " VALUES (%s, 't.x.v1', 'bogus', 'PENDING', '{}', 0, 0)"
            if store.dialect == "sqlite"
            else "INSERT INTO wf_instances (id, type, kind, status, input)"
            " VALUES (%s, 't.x.v1', 'bogus', 'PENDING', '{}')",
            (str(uuid.uuid4()),),
        )
    assert [r.id for r in store.list_instances()] == [good]


def test_sql_signal_refuses_deep_payloads(store: Store) -> None:
    client = Client(store, ALL)
    i = client.start(Waits, {})
    for depth in (65, 3000):
        message = refused(
            store,
            "INSERT INTO wf_signals (instance_id, name, payload) VALUES (%s, 'go', %s)",
            (i, json.dumps(nested(depth))),
        )
        assert "nests deeper than 64 levels" in message
    assert store.signals() == []


def test_sql_timer_rows_pass_the_same_checks_as_signals(store: Store) -> None:
    # Item 12: a 'timer' row skipped every check (2 MB into a COMPLETED instance).
    client = Client(store, ALL)
    done = client.start(Counted, {})
    run(store, deps())
    assert client.get(done).status == Status.COMPLETED
    message = refused(
        store,
        "INSERT INTO wf_signals (instance_id, kind, name, payload) VALUES (%s, 'timer', 't', %s)",
        (done, json.dumps({"x": "y" * 2_000_000})),
    )
    assert "limit" in message
    message = refused(
        store,
        "INSERT INTO wf_signals (instance_id, kind, name, payload) "
        "VALUES (%s, 'timer', 't', 'null')",
        (done,),
    )
    assert "ended" in message or "no more signals" in message
    waiting = client.start(Waits, {})
    message = refused(
        store,
        "INSERT INTO wf_signals (instance_id, kind, name, payload) VALUES (%s, 'timer', 't', %s)",
        (waiting, json.dumps(nested(100))),
    )
    assert "nests deeper" in message
    assert store.signals() == []


# -- rows stored before the checks: decoded safely, quarantined, never blocking ----------------
def store_deep_input(store: Store, instance_id: str) -> None:
    cast = "%s" if store.dialect == "sqlite" else "%s::jsonb"
    raw(store, f"UPDATE wf_instances SET input = {cast} WHERE id = %s", (DEEP_TEXT, instance_id))
    cast_ev = "%s" if store.dialect == "sqlite" else "%s::jsonb"
    raw(
        store,
        f"UPDATE wf_events SET payload = {cast_ev} WHERE instance_id = %s",
        (json.dumps({"input": "x"})[:-1] + ', "deep": ' + DEEP_TEXT + "}", instance_id),
    )


def test_an_undecodable_stored_input_is_dead_lettered_and_blocks_nothing(store: Store) -> None:
    client = Client(store, ALL)
    poison = client.start(Keeps, {"data": 1}, priority=0)  # first in line for every claim
    store_deep_input(store, poison)
    good = [client.start(Counted, {}, priority=5) for _ in range(3)]
    dependencies = deps()
    run(store, dependencies)
    assert sorted(dependencies["effects"]) == sorted(good)  # each once, none blocked
    assert all(client.get(g).status == Status.COMPLETED for g in good)
    record = client.get(poison)
    assert record.status == Status.STALLED
    assert record.error is not None
    assert record.error["code"] == "quarantined"
    assert isinstance(record.input, Undecodable)
    (letter,) = [d for d in client.dead_letters() if d["instance_id"] == poison]
    assert "nested too deep to decode" in letter["reason"]
    task = store.task(poison)
    assert task is not None
    assert task.lease_owner is None
    # The read commands show it instead of crashing.
    assert poison in [r.id for r in client.list()]
    assert record.input == {"undecodable": record.input.reason}
    assert any(isinstance(e.payload, Undecodable) for e in client.history(poison))


def test_an_undecodable_stored_signal_is_dead_lettered_and_the_instance_goes_on(
    store: Store,
) -> None:
    client = Client(store, ALL)
    i = client.start(Waits, {})
    run(store, deps())
    assert client.get(i).waiting is not None
    client.signal(i, "go", {"placeholder": 1})
    cast = "%s" if store.dialect == "sqlite" else "%s::jsonb"
    raw(
        store,
        f"UPDATE wf_signals SET payload = {cast} WHERE instance_id = %s AND kind = 'signal'",
        (DEEP_TEXT, i),
    )
    signals = [s for s in store.signals(instance_id=i) if s.kind == "signal"]
    assert isinstance(signals[0].payload, Undecodable)  # listing does not crash
    run(store, deps())
    record = client.get(i)
    assert record.status != Status.STALLED, record.error  # the instance is not poisoned
    (sig,) = [s for s in store.signals(instance_id=i) if s.kind == "signal"]
    assert sig.state == "dead"
    letters = [d for d in client.dead_letters() if d["instance_id"] == i]
    assert letters
    assert "nested too deep" in letters[0]["reason"]
    client.signal(i, "go", {"ok": True})
    run(store, deps())
    assert client.get(i).status == Status.COMPLETED
    assert client.get(i).progress["kept"] == {"ok": True}


# -- a schema newer than the code ----------------------------------------------------------
def test_a_schema_newer_than_the_code_is_refused(store: Store) -> None:
    if store.dialect == "sqlite":
        raw(store, "INSERT INTO wf_schema_migrations VALUES (99, 0)")
    else:
        raw(store, "INSERT INTO wf_schema_migrations (version) VALUES (99)")
    with pytest.raises(SchemaTooNew) as info:
        store.migrate()
    assert info.value.found == 99
    assert "version 99" in str(info.value)
    assert "upgrade" in str(info.value)
    with pytest.raises(SchemaTooNew):
        Runner(store, ALL, dependencies=deps()).start()


def test_the_cli_read_commands_show_undecodable_rows_instead_of_crashing(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    from statemachine_wf.cli import main

    client = Client(store, ALL)
    poison = client.start(Keeps, {"data": 1})
    store_deep_input(store, poison)
    waiting = client.start(Waits, {})
    run(store, deps())
    client.signal(waiting, "go", {"placeholder": 1})
    cast = "%s" if store.dialect == "sqlite" else "%s::jsonb"
    raw(
        store,
        f"UPDATE wf_signals SET payload = {cast} WHERE instance_id = %s AND kind = 'signal'",
        (DEEP_TEXT, waiting),
    )
    if store.dialect == "sqlite":
        where = ["--db", f"sqlite:///{store.path}"]  # type: ignore[attr-defined]
    else:
        where = ["--db", store.url, "--schema", store.schema]  # type: ignore[attr-defined]
    capsys.readouterr()
    for command, shown in (
        (["list"], poison),
        (["status", poison], "nested too deep to decode"),
        (["status", "--json", poison], "undecodable"),
        (["history", poison], "undecodable"),
        (["signals", waiting, "--list"], "pending=2"),
        (["signals", "--list"], "pending=2"),
    ):
        assert main([*where, *command]) == 0, command
        assert shown in capsys.readouterr().out, command


def test_redriving_a_dead_letter_with_a_deep_input_is_refused_by_name(store: Store) -> None:
    from statemachine_wf.client.inbox import redrive

    store.register_types(["t.poison.elsewhere.v1"], by="test")  # hosted by another runner
    envelope = {"type": "t.poison.elsewhere.v1", "input": {"data": nested(70)}}
    store.dead_letter(instance_id=None, envelope=envelope, reason="test", worker="w")
    (letter,) = store.dead_letters()
    with pytest.raises(InputError) as info:
        redrive(Client(store, []), int(letter["id"]), by="op")
    assert str(info.value).startswith(f"dead letter {letter['id']} input.data[0]")
    assert store.list_instances() == []


def test_stored_json_too_deep_is_undecodable_whatever_the_recursion_limit() -> None:
    import sys

    from statemachine_wf.stores._common import loads

    limit = sys.getrecursionlimit()
    for recursion_limit in (1000, 20_000):
        sys.setrecursionlimit(recursion_limit)
        try:
            value = loads(DEEP_TEXT)
            as_bytes = loads(DEEP_TEXT.encode())
        finally:
            sys.setrecursionlimit(limit)
        assert isinstance(value, Undecodable)
        assert isinstance(as_bytes, Undecodable)
        assert "nested too deep to decode" in value.reason
    assert loads(json.dumps(nested(90))) == nested(90)  # what the stores write reads back


def test_a_deep_stored_row_is_undecodable_even_with_the_recursion_limit_raised() -> None:
    """py_ecc (imported with the chain adapters) sets the recursion limit to 100,000: the
    decoder then overflows the C stack on a deep row and the process dies (SIGSEGV)
    instead of raising RecursionError. The depth is now counted before decoding."""
    import subprocess
    import sys

    code = (
        "import sys; sys.setrecursionlimit(100_000)\n"
        "from statemachine_wf.stores._common import Undecodable, loads\n"
        "text = '[' * 200_000 + ']' * 200_000\n"
        "print(isinstance(loads(text), Undecodable),\n"
        "      isinstance(loads(text.encode()), Undecodable))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["True", "True"]
