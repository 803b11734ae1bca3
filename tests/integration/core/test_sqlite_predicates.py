"""SQLite: partial indexes tested without temporary tables (migration 020).

SQLite tests an ``x IN (a, b, c)`` of more than two constants by building a temporary
b-tree of the list (``OpenEphemeral``), and it tests a partial index's predicate for every
row a statement writes into or out of the index. Written as IN lists, the predicates of
``wf_events_once``, ``wf_instances_active`` and ``wf_instances_finished`` built one for
every event appended and every status written. These tests pin the predicates, the
statements of a step that must build no temporary table, and the statements that must
still read through the rewritten indexes.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from statemachine_wf.stores._sqliteconn import _SCRIPTS
from statemachine_wf.stores.sqlite import SQLiteStore


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    path = str(tmp_path / "p.db")
    store = SQLiteStore(path)
    store.migrate()
    store.close()
    with sqlite3.connect(path) as db:
        yield db


def _null_params(statement: str) -> dict[str, None]:
    return {name: None for name in re.findall(r":(\w+)", statement)}


def _opcodes(conn: sqlite3.Connection, statement: str) -> list[str]:
    return [row[1] for row in conn.execute("EXPLAIN " + statement, _null_params(statement))]


def _plan(conn: sqlite3.Connection, statement: str) -> str:
    rows = conn.execute("EXPLAIN QUERY PLAN " + statement, _null_params(statement))
    return " | ".join(row[3] for row in rows)


def test_no_partial_index_predicate_is_an_in_list(conn: sqlite3.Connection) -> None:
    rows = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql LIKE '% WHERE %'"
    ).fetchall()
    names = {name for name, _ in rows}
    assert {"wf_events_once", "wf_instances_active", "wf_instances_finished"} <= names
    for name, sql in rows:
        predicate = sql.split(" WHERE ", 1)[1]
        assert not re.search(r"\bIN\s*\(", predicate, re.IGNORECASE), (name, predicate)


def _statement(query: str, marker: str) -> str:
    """The one statement of script ``query`` whose text holds ``marker``."""
    found = [text for text, _, _ in _SCRIPTS[query] if marker in text]
    assert len(found) == 1, (query, marker, len(found))
    return found[0]


@pytest.mark.parametrize(
    ("query", "marker"),
    [
        ("append_events", "INSERT INTO wf_events"),  # every event of a step
        ("apply_head", "SET status = :status"),  # the status, when it moves
        ("apply_head_moved", "status = :status"),  # with the head, when known to move
        ("apply_finish", "parent_node"),  # a sub-workflow's parent woken
        ("create", "INSERT INTO wf_instances"),  # a start's instance
        ("create", "INSERT INTO wf_events"),  # and its WORKFLOW_CREATED
    ],
)
def test_a_step_statement_builds_no_temporary_table(
    conn: sqlite3.Connection, query: str, marker: str
) -> None:
    statement = _statement(query, marker)
    assert "OpenEphemeral" not in _opcodes(conn, statement), statement


@pytest.mark.parametrize(
    ("query", "index"),
    [
        ("purge_batch", "wf_instances_finished"),
        ("soft_purge_batch", "wf_instances_finished"),
        ("throughput", "wf_instances_finished"),
        ("lock_waiters", "wf_instances_active"),
    ],
)
def test_the_readers_of_a_partial_index_still_use_it(
    conn: sqlite3.Connection, query: str, index: str
) -> None:
    # SQLite takes a partial index only for a WHERE that contains its predicate, spelled
    # the same way: a query left with the IN list would read another index or the table.
    statement = _statement(query, "wf_instances")
    assert index in _plan(conn, statement)


def test_the_unique_event_index_still_refuses_a_second_step_event(
    conn: sqlite3.Connection,
) -> None:
    conn.execute(
        "INSERT INTO wf_instances (id, type, kind, status, input, created_at, updated_at)"
        " VALUES ('i', 't', 'machine', 'RUNNING', '{}', 0, 0)"
    )
    insert = (
        "INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, created_at)"
        " VALUES ('i', 'a', ?, 1, '{}', 0)"
    )
    for kind in ("STEP_STARTED", "NODE_DISPATCHED", "SIGNAL_RECEIVED"):
        conn.execute(insert, (kind,))
    conn.execute(insert, ("SIGNAL_RECEIVED",))  # not once-per-attempt: a second is kept
    for kind in ("STEP_STARTED", "NODE_DISPATCHED"):
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(insert, (kind,))
