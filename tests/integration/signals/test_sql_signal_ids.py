"""``INSERT INTO wf_signals`` names its instance in any spelling of a UUID PostgreSQL reads
(upper or mixed case, braces, no hyphens), alike on both stores; the row holds the
canonical id, and the instance's version and wake-up go to it (SQLite's migration 017).

Before: PostgreSQL's ``uuid`` column took ``'ABC...'``, ``'{...}'`` or bare hex as the
canonical id, while SQLite's trigger compared the text as typed and refused the same
statement with "no such workflow instance" (the instance existed). Text that is no UUID,
or a UUID no instance has, is still refused, and writes nothing.
"""

from __future__ import annotations

import sqlite3
import uuid
from contextlib import closing
from typing import Any

import psycopg
import pytest

import statemachine_wf.stores._base as store_base
from statemachine_wf import Client, Status, Store
from statemachine_wf.stores import open_store
from statemachine_wf.stores._sql import migrations

from .test_signals import running, until_waiting
from .workflows import WORKFLOWS, Approval

StoreUrl = tuple[str, dict[str, str]]
INSERT = (
    "INSERT INTO wf_signals (instance_id, kind, name, payload) VALUES ({p}, {p}, 'approved', {p})"
)


def sql_signal(store_url: StoreUrl, instance_id: Any, payload: str, kind: str = "signal") -> None:
    """The producer's one statement, the id a bound parameter (a string, as a driver sends
    it). SQLite's connection enforces foreign keys, as the store's own do."""
    url, options = store_url
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        with closing(sqlite3.connect(path, timeout=10, isolation_level=None)) as conn:
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(INSERT.format(p="?"), (instance_id, kind, payload))
        return
    with psycopg.connect(
        url, autocommit=True, options=f"-c search_path={options['schema']}"
    ) as conn:
        conn.execute(INSERT.format(p="%s").encode(), (instance_id, kind, payload))


def spellings(canonical: str) -> dict[str, str]:
    """Other spellings of ``canonical`` that PostgreSQL's uuid type reads as it."""
    bare = canonical.replace("-", "")
    return {
        "upper case": canonical.upper(),
        "mixed case": canonical[:18].upper() + canonical[18:],
        "braces": "{" + canonical + "}",
        "no hyphens": bare,
        "braces, upper case, no hyphens": "{" + bare.upper() + "}",
        "a hyphen after any four digits": "-".join(bare[i : i + 4] for i in range(0, 32, 4)),
    }


def not_uuids(canonical: str) -> list[str]:
    """Text that names no instance: not a UUID to PostgreSQL either."""
    bare = canonical.replace("-", "")
    return [
        "not-a-uuid",
        "",
        " " + canonical,
        canonical + " ",
        "urn:uuid:" + canonical,
        "{" + canonical,
        canonical + "}",
        "{{" + canonical + "}}",
        canonical[:-1],
        canonical + "0",
        bare[:5] + "-" + bare[5:],  # a hyphen inside a group of four
        bare[:4] + "--" + bare[4:],
        "-" + bare,
        bare + "-",
        "g" + canonical[1:],  # not hex
    ]


def refused(store: Store, store_url: StoreUrl, instance_id: Any, why: str) -> None:
    with pytest.raises((sqlite3.Error, psycopg.Error)) as error:
        sql_signal(store_url, instance_id, '"no"')
    message = str(error.value)
    if store.dialect == "sqlite":
        assert f"wf_signals: {why}" in message, message
    elif why == "no such workflow instance":
        assert "no workflow instance" in message or "invalid input syntax for type uuid" in message
    else:
        assert "it takes no more signals" in message, message


def test_every_uuid_spelling_signals_the_waiting_instance(
    store: Store, store_url: StoreUrl
) -> None:
    client = Client(store, WORKFLOWS)
    with running(store):
        canonical = client.start(Approval, {"timeout": 60})
        named = {"canonical": canonical}
        for how in ("upper case", "braces", "no hyphens", "braces, upper case, no hyphens"):
            iid = client.start(Approval, {"timeout": 60})
            named[how] = spellings(iid)[how]
        ids = {how: str(uuid.UUID(spelled)) for how, spelled in named.items()}
        for how, iid in ids.items():
            until_waiting(store, iid)
            sql_signal(store_url, named[how], f'{{"via": "{how}"}}')
        for how, iid in ids.items():
            record = client.wait(iid, timeout=20)  # woken: the wait's deadline is 60 s away
            assert (record.status, record.progress["approved"]) == (
                Status.COMPLETED,
                {"via": how},
            ), how
            [row] = [r for r in store.signals(instance_id=iid) if r.kind == "signal"]
            assert (row.instance_id, row.state) == (iid, "applied"), how
    assert client.signal_counts()["applied"] == len(ids)


def test_the_row_holds_the_canonical_id_and_bumps_that_instance(
    store: Store, store_url: StoreUrl
) -> None:
    client = Client(store, WORKFLOWS)
    iid = client.start(Approval, {"timeout": 60})  # PENDING: it takes signals
    other = client.start(Approval, {"timeout": 60})
    version = store.get(iid).version  # type: ignore[union-attr]
    for n, spelled in enumerate([iid, *spellings(iid).values()], start=1):
        sql_signal(store_url, spelled, str(n))
        assert store.get(iid).version == version + n, spelled  # type: ignore[union-attr]
    # A timer row from SQL passes the same checks (migration 010) and is rewritten too; it
    # wakes nobody, so the version stays.
    sql_signal(store_url, iid.upper(), "0", kind="timer")
    assert store.get(iid).version == version + 1 + len(spellings(iid))  # type: ignore[union-attr]
    rows = store.signals(instance_id=iid)
    assert [r.payload for r in reversed(rows)] == [*range(1, 2 + len(spellings(iid))), 0]
    assert rows[0].kind == "timer"
    assert {r.instance_id for r in store.signals()} == {iid}
    assert store.signals(instance_id=other) == []


def test_no_uuid_an_unknown_one_or_an_ended_instance_is_refused_and_writes_nothing(
    store: Store, store_url: StoreUrl
) -> None:
    client = Client(store, WORKFLOWS)
    iid = client.start(Approval, {"timeout": 60})
    ended = client.start(Approval, {"timeout": 60})
    client.cancel(ended)
    versions = {i: store.get(i).version for i in (iid, ended)}  # type: ignore[union-attr]
    # A NUL: SQLite's text can hold one (PostgreSQL's cannot, its driver refuses it).
    nul = [iid + "\x00"] if store.dialect == "sqlite" else []
    for text in [*not_uuids(iid), *nul]:
        refused(store, store_url, text, "no such workflow instance")
    unknown = str(uuid.uuid4())
    for text in [unknown, *spellings(unknown).values()]:
        refused(store, store_url, text, "no such workflow instance")
    for text in [ended, *spellings(ended).values()]:
        refused(store, store_url, text, "the workflow instance has ended")
    assert store.signals() == []
    assert store.dead_letters() == []
    assert {i: store.get(i).version for i in versions} == versions  # type: ignore[union-attr]


def test_sqlite_an_instance_stored_under_another_spelling_keeps_its_signals(
    sqlite_store: Store, sqlite_path: str
) -> None:
    """SQLite's wf_start kept any text as an id before migration 016: such an instance is
    still named by that text, and the canonical id names the canonical instance."""
    client = Client(sqlite_store, WORKFLOWS)
    canonical = client.start(Approval, {"timeout": 60})
    legacy = canonical.upper()
    with closing(sqlite3.connect(sqlite_path, isolation_level=None)) as conn:
        conn.execute(
            "INSERT INTO wf_instances (id, type, kind, status, input, created_at, updated_at)"
            " SELECT ?, type, kind, status, input, created_at, updated_at FROM wf_instances"
            " WHERE id = ?",
            (legacy, canonical),
        )
    url: StoreUrl = (f"sqlite:///{sqlite_path}", {})
    sql_signal(url, legacy, "1")  # the exact id: the legacy row
    sql_signal(url, "{" + legacy + "}", "2")  # another spelling: the canonical row
    sql_signal(url, canonical.replace("-", ""), "3")
    assert [r.payload for r in sqlite_store.signals(instance_id=legacy)] == [1]
    assert [r.payload for r in sqlite_store.signals(instance_id=canonical)] == [3, 2]


def test_a_database_at_016_takes_other_spellings_once_migrated(
    store_url: StoreUrl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        store_base, "migrations", lambda dialect: [m for m in migrations(dialect) if m[0] < 17]
    )
    url, options = store_url
    store = open_store(url, **options)
    try:
        assert store.migrate() == 16
        client = Client(store, WORKFLOWS)
        iid = client.start(Approval, {"timeout": 60})
        sql_signal(store_url, iid, "1")
        if store.dialect == "sqlite":  # the old trigger: the text as typed
            with pytest.raises(sqlite3.Error, match="no such workflow instance"):
                sql_signal(store_url, iid.upper(), "2")
        else:
            sql_signal(store_url, iid.upper(), "2")
        monkeypatch.undo()
        assert store.migrate() == max(n for n, _ in migrations(store.dialect))
        version = store.get(iid).version  # type: ignore[union-attr]
        sql_signal(store_url, "{" + iid.upper() + "}", "3")
        assert store.get(iid).version == version + 1  # type: ignore[union-attr]
        rows = store.signals(instance_id=iid)
        assert [r.instance_id for r in rows] == [iid] * len(rows)
        expected = [3, 1] if store.dialect == "sqlite" else [3, 2, 1]
        assert [r.payload for r in rows] == expected
    finally:
        store.close()
