"""Property: bad values through the ``statemachine-wf`` command (issue 9's CLI channel).

Random bad values for every argument of the command that carries user data (``start
TYPE --input --key --priority --delay --run-at``, ``signal ID NAME --payload --token
--delay``, the id of ``status``, ``cancel``, ``resume``, ``retry`` and ``history``) are
refused: a non-zero exit code, one ``error:`` line that names the problem (never a
traceback), nothing on stdout and nothing written to the store. Then valid runs (one
started before the bad calls, their target, and one after) signalled and worked through
the same command (``worker --until-idle``) complete, each side effect counted exactly
once. On both stores; the command runs in-process through
:func:`statemachine_wf.cli.main`, hosting this module's workflow (``-m``) with its
dependencies from :func:`deps` (``--deps``).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine_wf import COMPLETED, Client, Status, StepContext, Store, Workflow, step
from statemachine_wf.cli import main
from statemachine_wf.client.machine import MAX_PRIORITY
from statemachine_wf.definition.events import Ev
from statemachine_wf.definition.limits import DEFAULT_MAX_PAYLOAD_BYTES, MAX_JSON_DEPTH
from statemachine_wf.definition.workflow import SIGNAL_PATTERN

TYPE = "t.cli_inputs.v1"
MODULE = __name__
EFFECTS: list[str] = []
_GUARD = threading.Lock()


class In(BaseModel):
    n: int
    note: str = ""


class Counted(Workflow[In, BaseModel]):
    """The valid work: ``act`` is the side effect (counted), then it waits for ``go``."""

    workflow_type = TYPE
    effects: list[str]
    guard: threading.Lock

    @step(initial=True, to="wait")
    def act(self, ctx: StepContext[In, BaseModel]) -> None:
        with self.guard:
            self.effects.append(ctx.instance_id)

    @step(to=COMPLETED, signals=["go"])
    def wait(self, ctx: StepContext[In, BaseModel]) -> None:
        ctx.wait_for("go")


def deps() -> dict[str, Any]:
    """``worker --deps``: the module's effect list, so the test sees what the worker did."""
    return {"effects": EFFECTS, "guard": _GUARD}


# -- running the command ---------------------------------------------------------------------
@dataclass
class Ran:
    code: int | str | None
    out: str
    err: str


def _stream(errors: str) -> io.TextIOWrapper:
    # As a terminal's: stdout strict UTF-8, stderr backslashreplace; a lone surrogate
    # printed to stdout fails here as it would in a shell.
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors=errors, write_through=True)


def cli(where: list[str], *argv: str, hosted: bool = True) -> Ran:
    """``statemachine-wf --db ... -m <this module> ARGV`` in-process, its output captured
    (without ``-m`` unless ``hosted``).

    An exception out of ``main`` (the traceback a user would see) fails the test; the
    ``SystemExit`` of argparse's usage errors is its exit code, as in a shell.
    """
    out, err = _stream("strict"), _stream("backslashreplace")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: int | str | None = main([*where, *(["-m", MODULE] if hosted else []), *argv])
        except SystemExit as exc:
            code = exc.code
    assert isinstance(out.buffer, io.BytesIO)
    assert isinstance(err.buffer, io.BytesIO)
    return Ran(code, out.buffer.getvalue().decode(), err.buffer.getvalue().decode())


def store_args(store_url: tuple[str, dict[str, str]]) -> list[str]:
    url, extra = store_url
    return ["--db", url] + (["--schema", extra["schema"]] if "schema" in extra else [])


def written(store: Store) -> tuple[int, int, int, int]:
    """Instances, events, signal rows and dead letters: a refused call changes none."""
    ids = [r.id for r in store.list_instances(limit=10_000)]
    client = Client(store)
    return (
        len(ids),
        sum(len(store.events(i)) for i in ids),
        sum(client.signal_counts().values()),
        len(client.dead_letters(limit=10_000)),
    )


def refused(ran: Ran, names: str) -> None:
    """A clear refusal: exit code != 0, one ``error:`` line naming the problem, no output."""
    assert ran.code not in (0, None), ran
    assert "Traceback" not in ran.err, ran.err
    assert ran.out == "", ran.out
    lines = [line for line in ran.err.splitlines() if "error:" in line]
    assert len(lines) == 1, ran.err
    (line,) = lines
    assert line.startswith(("error: ", "statemachine-wf ")), line
    assert re.search(names, line, flags=re.IGNORECASE), (names, line)


# -- bad values --------------------------------------------------------------------------------
TARGET = "<target>"  # replaced by the id of the example's valid instance
VALID_INPUT = '{"n": 1}'


@dataclass(frozen=True)
class Bad:
    """One bad call: its arguments (after ``--db``/``-m``) and what its error must name."""

    argv: tuple[str, ...]
    names: str

    def args(self, target: str) -> list[str]:
        return [target if a == TARGET else a for a in self.argv]


def _not_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return True
    return False


def _deep(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


DEEP = "deeper than 64"
NOT_JSON = "is not JSON"
NUL = r"NUL character \(\\u0000\)"
SURROGATE = "lone surrogate"
NAN = "not a JSON number"
TOO_BIG = rf"the limit is {DEFAULT_MAX_PAYLOAD_BYTES} bytes"
BIG_INT = "integer too large to store"

# JSON texts no store keeps: (text, what the error names). ``wrap`` puts the poison in a
# field of an otherwise valid input, so the model would take it.
not_json = st.one_of(
    st.sampled_from(["", "{", "{'n': 1}", '{"n": 1,}', "nul", "[1, 2", '{"n": 1}}', "\x00"]),
    st.text(max_size=30).filter(_not_json),
).map(lambda t: (t, f"{NOT_JSON}|{DEEP}"))


def poison_json(wrap: bool) -> st.SearchStrategy[tuple[str, str]]:
    def put(value_text: str) -> str:
        return '{"n": 1, "x": ' + value_text + "}" if wrap else value_text

    nul = st.text(max_size=8).map(lambda s: json.dumps(s + "\x00"))  # the escape \u0000
    surrogate_escaped = st.integers(0xD800, 0xDFFF).map(lambda c: f'"a\\u{c:04x}"')
    # As argv holds undecodable bytes of a shell argument: a raw lone surrogate.
    surrogate_raw = st.integers(0xDC80, 0xDCFF).map(lambda c: '"' + chr(c) + '"')
    nans = st.sampled_from(["NaN", "Infinity", "-Infinity", "[1, NaN]", '{"k": -Infinity}'])
    deep = st.one_of(
        st.integers(MAX_JSON_DEPTH + 1, 200),  # refused by the library's walk
        st.integers(2_000, 20_000),  # past Python's decoder: a RecursionError before the fix
    ).map(_deep)
    big_int = st.integers(3_950, 6_000).map(lambda k: "9" * k)  # past 4,300 digits: unreadable
    return st.one_of(
        nul.map(lambda t: (put(t), NUL)),
        surrogate_escaped.map(lambda t: (put(t), SURROGATE)),
        surrogate_raw.map(lambda t: (put(t), SURROGATE)),
        nans.map(lambda t: (put(t), NAN)),
        deep.map(lambda t: (put(t), DEEP)),
        big_int.map(lambda t: (put(t), BIG_INT)),
    )


too_large = st.integers(DEFAULT_MAX_PAYLOAD_BYTES + 1, DEFAULT_MAX_PAYLOAD_BYTES + 20_000)
not_the_model = st.one_of(
    st.sampled_from(
        [
            '{"n": "abc"}',
            "{}",
            "5",
            "[]",
            '"s"',
            "null",
            '{"n": 1.5}',
            '{"n": [1]}',
            '{"n": 1, "note": 5}',
        ]
    ),
    st.text(alphabet="abcdefghij", min_size=1, max_size=10).map(lambda s: json.dumps({"n": s})),
)
bad_inputs = st.one_of(
    not_json,
    poison_json(wrap=True),
    poison_json(wrap=False),
    too_large.map(lambda n: (json.dumps({"n": 1, "note": "y" * n}), TOO_BIG)),
    not_the_model.map(lambda t: (t, "input does not fit In")),
)
bad_payloads = st.one_of(
    not_json,
    poison_json(wrap=True),
    poison_json(wrap=False),
    too_large.map(lambda n: (json.dumps("z" * n), TOO_BIG)),
)

bad_priorities = st.one_of(
    st.integers(max_value=-1).map(str),
    st.integers(min_value=MAX_PRIORITY + 1).map(str),
    st.sampled_from(["", "x", "1.5", "1e3", "0x10", "nan", "9" * 5_000]),  # argparse's "int"
)
bad_delays = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "-1", "-0.001", "1e300", "1e400", "x", ""]),
    st.floats(max_value=-1e-9, allow_infinity=False).map(repr),
    st.floats(min_value=3_155_760_001, allow_infinity=False).map(repr),
)


def _not_iso(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return True
    return False


bad_run_ats = st.one_of(
    st.sampled_from(["garbage", "tomorrow", "2024-13-01T00:00:00+00:00", "\x00", "1e9"]),
    st.text(max_size=25).filter(_not_iso),
    st.datetimes().map(lambda d: d.isoformat()),  # no timezone
)
bad_keys = st.one_of(
    st.just(""),
    st.text(max_size=10).map(lambda s: s + "\x00"),
    st.integers(0xD800, 0xDFFF).map(lambda c: "k" + chr(c)),
)
bad_tokens = st.one_of(
    bad_keys,
    st.integers(201, 2_000).map(lambda n: "t" * n),
)
unknown_types = st.one_of(
    st.sampled_from(["no.such.v1", "t.cli_inputs.v2", "", "\x00", "\ud800"]),
    st.text(max_size=40),
).filter(lambda t: t != TYPE)
unknown_signals = st.from_regex(SIGNAL_PATTERN, fullmatch=True).filter(lambda s: s != "go")
# "go\n" among them: before the fix a name with a trailing newline passed the pattern.
invalid_signal_names = st.one_of(
    st.sampled_from(["", "go\n", "1go", "go go", "g\x00", "\ud800"]),
    st.text(max_size=30).filter(lambda s: not SIGNAL_PATTERN.fullmatch(s)),
)


def _not_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return True
    return False


bad_ids = st.one_of(
    st.text(max_size=50).filter(_not_uuid),  # NUL, surrogates, anything
    st.integers(61, 5_000).map(lambda n: "1" * n),  # huge
    st.sampled_from(["\x00" * 36, "\ud800" * 36, "x", "00000000-0000-0000-0000-00000000000g"]),
    st.uuids().map(str),  # a UUID, but no instance has it
)
ID_NAMES = "must be a UUID|no workflow instance"


def _start(*options: str) -> tuple[str, ...]:
    # Options as --name=value (a value may start with "-"); "--" before the positionals.
    return ("start", *options, "--", TYPE)


bad_calls = st.one_of(
    bad_inputs.map(lambda v: Bad(_start(f"--input={v[0]}"), v[1])),
    bad_priorities.map(
        lambda v: Bad(_start(f"--input={VALID_INPUT}", f"--priority={v}"), "priority")
    ),
    bad_delays.map(lambda v: Bad(_start(f"--input={VALID_INPUT}", f"--delay={v}"), "delay")),
    bad_run_ats.map(lambda v: Bad(_start(f"--input={VALID_INPUT}", f"--run-at={v}"), "run.at")),
    st.just(
        Bad(
            _start(f"--input={VALID_INPUT}", "--run-at=2030-01-01T00:00:00+00:00", "--delay=5"),
            "delay or run_at",
        )
    ),
    bad_keys.map(lambda v: Bad(_start(f"--input={VALID_INPUT}", f"--key={v}"), "idempotency_key")),
    unknown_types.map(
        lambda t: Bad(("start", f"--input={VALID_INPUT}", "--", t), "unknown workflow type")
    ),
    bad_payloads.map(lambda v: Bad(("signal", f"--payload={v[0]}", "--", TARGET, "go"), v[1])),
    bad_tokens.map(lambda v: Bad(("signal", f"--token={v}", "--", TARGET, "go"), "token")),
    bad_delays.map(lambda v: Bad(("signal", f"--delay={v}", "--", TARGET, "go"), "delay")),
    unknown_signals.map(lambda s: Bad(("signal", "--", TARGET, s), "has no signal")),
    invalid_signal_names.map(lambda s: Bad(("signal", "--", TARGET, s), "not a valid name")),
    st.tuples(
        st.sampled_from(["status", "cancel", "resume", "retry", "history", "signal"]), bad_ids
    ).map(lambda c: Bad((c[0], "--", c[1], *(["go"] if c[0] == "signal" else [])), ID_NAMES)),
)


# -- the property ------------------------------------------------------------------------------
def instance_ids(store: Store) -> set[str]:
    return {r.id for r in store.list_instances(limit=10_000)}


def run_valid(store: Store, where: list[str], ids: set[str]) -> None:
    """Start, signal and work valid runs: each completes, its side effect counted once."""
    ran = cli(where, "start", f"--input={VALID_INPUT}", "--", TYPE)
    assert ran.code == 0, ran
    runs = [*ids, ran.out.strip()]
    for run in runs:
        ran = cli(where, "signal", '--payload={"ok": true}', "--", run, "go")
        assert ran.code == 0, ran
    ran = cli(where, "worker", "--until-idle", "--concurrency=2", f"--deps={MODULE}:deps")
    assert ran.code == 0, ran
    assert "Traceback" not in ran.err, ran.err
    client = Client(store)
    for run in runs:
        assert client.get(run).status == Status.COMPLETED
        assert [e.event_type for e in client.history(run)].count(Ev.COMPLETED) == 1
    ran_effects = sorted(EFFECTS)
    assert ran_effects == sorted(runs)  # each side effect once, and no other


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(calls=st.lists(bad_calls, min_size=1, max_size=8))
def test_bad_cli_arguments_are_refused_and_valid_work_runs_once(
    store: Store, store_url: tuple[str, dict[str, str]], calls: list[Bad]
) -> None:
    where = store_args(store_url)
    EFFECTS.clear()
    ran = cli(where, "start", f"--input={VALID_INPUT}", "--", TYPE)  # the signals' target
    assert ran.code == 0, ran
    target = ran.out.strip()
    before, ids = written(store), instance_ids(store)
    for bad in calls:
        ran = cli(where, *bad.args(target))
        refused(ran, bad.names)
        assert written(store) == before, bad
    assert instance_ids(store) == ids
    assert target not in EFFECTS
    run_valid(store, where, {target})  # the examples share the store; earlier runs are done


# -- regressions: the bad values the property found, each run every time, on both stores -------
@contextlib.contextmanager
def recursion_limit(limit: int) -> Iterator[None]:
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


@pytest.mark.parametrize("flag", ["--input", "--payload"])
@pytest.mark.parametrize(
    ("text", "limit", "names"),
    [
        # Before: a RecursionError traceback (Python's decoder recurses; the command runs
        # with the default recursion limit).
        (_deep(5_000), 1_000, "{flag} nests deeper than 64 levels (the limit)"),
        # Before: the process crashed (SIGSEGV): with the limit py_ecc sets on import (the
        # chain workflows import it) the decoder overflows the C stack first.
        (_deep(200_000), 100_000, "{flag} nests deeper than 64 levels (the limit)"),
        # Before: "error: Exceeds the limit (4300 digits) ...", naming no argument.
        ('{"n": ' + "7" * 4_400 + "}", 1_000, "{flag} holds an integer too large to store"),
    ],
    ids=["deep", "deeper-than-the-c-stack", "digits"],
)
def test_json_python_cannot_decode_is_refused_naming_the_argument(
    store: Store,
    store_url: tuple[str, dict[str, str]],
    flag: str,
    text: str,
    limit: int,
    names: str,
) -> None:
    where = store_args(store_url)
    ran = cli(where, "start", f"--input={VALID_INPUT}", "--", TYPE)
    assert ran.code == 0, ran
    target = ran.out.strip()
    before = written(store)
    argv = (
        ("start", f"--input={text}", "--", TYPE)
        if flag == "--input"
        else ("signal", f"--payload={text}", "--", target, "go")
    )
    with recursion_limit(limit):
        ran = cli(where, *argv)
    refused(ran, re.escape(names.format(flag=flag)))
    assert ran.code == 2
    assert written(store) == before


def test_an_empty_run_at_is_refused_not_taken_for_now(
    store: Store, store_url: tuple[str, dict[str, str]]
) -> None:
    # Before: --run-at "" (an unset shell variable) started the run at once.
    ran = cli(store_args(store_url), "start", f"--input={VALID_INPUT}", "--run-at=", "--", TYPE)
    refused(ran, "--run-at is not an ISO 8601 time")
    assert written(store) == (0, 0, 0, 0)


def test_a_signal_name_with_a_trailing_newline_is_refused_without_the_workflow(
    store: Store, store_url: tuple[str, dict[str, str]]
) -> None:
    # Before: the name pattern's "$" matched before a final newline, so a command that
    # hosts no workflows (no -m) stored the signal "go\n".
    where = store_args(store_url)
    target = Client(store, [Counted]).start(Counted, In(n=1))
    before = written(store)
    ran = cli(where, "signal", "--", target, "go\n", hosted=False)
    refused(ran, "not a valid name")
    assert ran.code == 2
    assert written(store) == before
