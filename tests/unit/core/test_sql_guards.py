"""The ``-- only when :p`` guards of the SQLite queries: how a script's statements are
split and tagged, and that every shipped guarded statement really does nothing when its
guard is unset (so the store's skipping it changes no row)."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

from statemachine_wf.core.dag_interpret import DagDecision, NodeTask
from statemachine_wf.core.store import DagCommit
from statemachine_wf.stores._sql import guarded_statements, queries
from statemachine_wf.stores.sqlite import SQLiteStore
from tests.contract.test_dag_runs import claim_node, start


def test_a_guard_tags_only_the_statement_after_it() -> None:
    script = """
    -- a plain comment
    DELETE FROM a;
    -- only when :x
    DELETE FROM b WHERE :x;
    DELETE FROM c;
    SELECT 1
    """
    assert guarded_statements(script) == [
        ("DELETE FROM a;", None, None),
        ("DELETE FROM b WHERE :x;", "x", None),
        ("DELETE FROM c;", None, None),
        ("SELECT 1", None, None),
    ]


def test_a_probe_names_the_parameter_it_sets() -> None:
    script = """
    -- sets :y
    SELECT EXISTS (SELECT 1 FROM a);
    -- only when :y
    DELETE FROM a WHERE :y;
    SELECT 1
    """
    assert guarded_statements(script) == [
        ("SELECT EXISTS (SELECT 1 FROM a);", None, "y"),
        ("DELETE FROM a WHERE :y;", "y", None),
        ("SELECT 1", None, None),
    ]


def _guarded() -> list[tuple[str, str, str]]:
    return [
        (name, statement, guard)
        for name, text in queries("sqlite").items()
        for statement, guard, _ in guarded_statements(text)
        if guard is not None
    ]


def test_the_dag_commit_and_the_timer_are_guarded() -> None:
    guards = {(name, guard) for name, _, guard in _guarded()}
    assert {
        ("dag_head", "status"),
        ("dag_tail", "finish"),
        ("dag_tail", "done"),
        ("dag_tail", "retry"),
        ("dag_tail", "sib_token"),
        ("dag_tail", "also_n"),
        ("dag_tail", "n_dispatch"),
        ("apply_signals", "timer_token"),
        ("apply_head", "status_unknown"),
        ("apply_finish", "ends_rest"),
    } <= guards


def test_a_guarded_statement_changes_nothing_while_its_guard_is_unset(tmp_path: Path) -> None:
    # A DAG instance with open node tasks (one leased, one due) for the statements to hit
    # if a guard were wrong.
    path = str(tmp_path / "swf.db")
    store = SQLiteStore(path)
    store.migrate()
    iid, _ = start(store)
    claim_node(store, "s")
    rec = store.get(iid)
    assert rec is not None
    dispatch = (NodeTask("a"), NodeTask("b"))
    store.dag_apply(DagCommit(iid, rec.version, DagDecision(dispatch=dispatch), "w"))
    store.close()
    conn = sqlite3.connect(path)
    for name, statement, guard in _guarded():
        params: dict[str, object] = dict.fromkeys(re.findall(r":(\w+)", statement))
        # Every other parameter set as a decision would set it, for this instance.
        params.update(
            id=iid, now=time.time(), worker="w", lease=60.0, version=rec.version + 1,
            status="FAILED", done="s", retry="s", sib_token="t", token=None, n_dispatch=1,
            finish=True, timer_token="tt", timer_due=0.0, retry_delay=0.0, retry_failures=1,
            dispatch='[{"node": "c", "delay": 0, "attempt": 0}]', settled="[]", dead="[]",
            also_done='["a"]', also_n=1, sib_n=2, sib_tokens='["t", "t2"]',
        )  # fmt: skip
        params[guard] = {"finish": False, "n_dispatch": 0}.get(guard)  # as a decision unsets it
        if guard == "n_dispatch":  # the count of :dispatch: unset means an empty one
            params["dispatch"] = "[]"
        before = conn.total_changes
        conn.execute(statement, params)
        assert conn.total_changes == before, (name, guard, statement)
    conn.rollback()
    conn.close()
