"""Type-prefix routing: SQL wildcards in a prefix are literal except a trailing ``%`` (on
both stores, for the runner's claims and for ``list``), and on PostgreSQL the claim stays
an index lookup with many rows of other types."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from pydantic import BaseModel

from statemachine_wf import COMPLETED, Client, Runner, RunnerOptions, StepContext, Store
from statemachine_wf import Workflow as _Workflow
from statemachine_wf import step as _step
from statemachine_wf.core.store import NewInstance, like_prefix, matches_prefix
from statemachine_wf.stores._sql import queries
from tests.plugins.stores import PG_DSN


class In(BaseModel):
    n: int = 0


def make(type_name: str) -> type[_Workflow[In, In]]:
    class W(_Workflow[In, In]):
        workflow_type = type_name

        @_step(initial=True, to=COMPLETED)
        def go(self, ctx: StepContext[In, In]) -> None: ...

    W.__name__ = W.__qualname__ = "W_" + re.sub(r"\W", "_", type_name)
    return W


# Each prefix: a type it must take, a type it must not (a LIKE wildcard would take it).
TRICKY = {
    "bill_ing.%": ("bill_ing.invoice.v1", "billxing.invoice.v1"),
    "100%off.%": ("100%off.sale.v1", "100xyzoff.sale.v1"),
    "back\\slash.": ("back\\slash.x.v1", "backslash.x.v1"),
    "a%": ("a.x.v1", None),  # a trailing % is "anything after"
}


@pytest.mark.parametrize("prefix", list(TRICKY))
def test_prefix_is_literal_except_trailing_percent(prefix: str) -> None:
    yes, no = TRICKY[prefix]
    assert matches_prefix(yes, prefix)
    if no is not None:
        assert not matches_prefix(no, prefix)
    pattern = like_prefix(prefix)
    assert pattern.endswith("%")
    assert not re.search(r"(?<!\\)[%_]", pattern[:-1])  # every other wildcard is escaped


def test_runner_claims_only_literal_prefix_matches(store: Store) -> None:
    # Python workflow types are lowercase dotted names; these would match the prefixes
    # below only if a prefix were a LIKE pattern (``_`` any char, ``%`` anything, ``\``
    # an escape).
    hosted = ["bill_ing.invoice.v1", "billxing.invoice.v1", "billing.x.v1", "backslash.x.v1"]
    kinds = [make(t) for t in hosted]
    client = Client(store, kinds)
    ids = {cls.spec().workflow_type: client.start(cls, In()) for cls in kinds}
    prefixes = ("bill_ing.%", "bill%ing.", "back\\slash.")
    runner = Runner(store, kinds, options=RunnerOptions(prefixes=prefixes, concurrency=1))
    assert runner.types == ("bill_ing.invoice.v1",)
    runner.run_until_idle(timeout=30)
    done = {t for t, i in ids.items() if client.status(i) == "COMPLETED"}
    assert done == {"bill_ing.invoice.v1"}


def test_list_prefix_is_literal(store: Store) -> None:
    # Types written by other producers (SQL) can hold any character: list them.
    for pair in TRICKY.values():
        for type_name in pair:
            if type_name is not None:
                store.create(
                    NewInstance(id=str(uuid.uuid4()), type=type_name, input={}, initial="go")
                )
    for prefix, (yes, no) in TRICKY.items():
        listed = {r.type for r in store.list_instances(type_prefix=prefix)}
        assert yes in listed
        assert no not in listed
        if prefix != "a%":
            assert listed == {yes}


@pytest.mark.postgres
def test_claim_is_an_index_lookup_among_many_other_types(pg_schema: str) -> None:
    """50,000 due tasks, 25,000 of a common type of ours, 20 of a rare one: each claim's
    pick (state machines and DAG nodes) reads a few pages down wf_tasks_type_pick, never
    the table and never a sort of the due tasks; the same before the table has
    statistics (right after a burst of starts) as after (swf_pick, migration 015)."""
    import psycopg

    from statemachine_wf.stores.postgres import PostgresStore

    store = PostgresStore(PG_DSN, schema=pg_schema)
    store.migrate()
    store.close()
    claim, dag_claim = queries("postgres")["claim"], queries("postgres")["dag_claim"]
    # The picks: lock holders' due tasks, then the rest (the CTEs before `prev`); the DAG
    # claim's candidates and what it locks (the CTEs before `claimed`).
    ctes = re.search(r"WITH (.*?), prev AS \(", claim, re.S)
    dag_ctes = re.search(r"WITH (picked AS \(.*?\)), claimed AS \(", dag_claim, re.S)
    assert ctes is not None
    assert dag_ctes is not None
    picks = {
        "machine": f"WITH {ctes.group(1)} SELECT id FROM picked",
        "dag": f"WITH {dag_ctes.group(1)} SELECT id FROM picked",
    }
    with psycopg.connect(PG_DSN, autocommit=True, options=f"-c search_path={pg_schema}") as c:
        c.execute(
            "INSERT INTO wf_instances (id, type, kind, status, step, input)"
            " SELECT gen_random_uuid(), type,"
            "  CASE WHEN type LIKE 'dag.%' THEN 'dag' ELSE 'machine' END, 'PENDING', 'go', '{}'"
            " FROM (SELECT CASE WHEN g % 2500 = 0 THEN 'mine.rare.v1'"
            "                   WHEN g % 2 = 0 THEN 'mine.common.v1'"
            "                   WHEN g % 5 = 1 THEN 'dag.common.v1'"
            "                   WHEN g % 5 = 3 THEN 'mine.parked.v1'"
            "                   WHEN g % 10 = 9 THEN 'dag.parked.v1'"
            "                   ELSE 'other.' || (g % 7) || '.v1' END AS type"
            "       FROM generate_series(1, 50000) g) AS s"
        )
        c.execute(
            "INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at)"
            " SELECT id, CASE WHEN kind = 'dag' THEN 'n' ELSE '' END, 'go', kind, type, 100,"
            # Parked: the tasks of these types are due in an hour (waiting instances,
            # leases), a few due now. A walk that filters on due_at instead of stopping
            # at it would read all 5,000 of a type on every claim.
            "  CASE WHEN type LIKE '%.parked.%' AND abs(hashtext(id::text)) % 1000 <> 0"
            "       THEN now() + interval '1 hour' ELSE now() - interval '1 second' END"
            " FROM wf_instances"
        )
        # 16 signer slots held: the holders' tasks are looked up one by one, not scanned.
        c.execute(
            "INSERT INTO wf_locks (key, holder)"
            " SELECT 'eth:1:' || id, id FROM wf_instances WHERE kind = 'machine'"
            " ORDER BY id LIMIT 16"
        )
        machine = [f"other.{k}.v1" for k in range(7)] + ["mine.rare.v1", "mine.common.v1"]
        cases = [
            ("machine", ["mine.rare.v1"]),
            ("machine", ["mine.common.v1"]),
            ("machine", ["nobody.v1"]),
            ("machine", ["mine.parked.v1"]),
            ("machine", machine),
            ("dag", ["dag.common.v1"]),
            ("dag", ["dag.parked.v1"]),
            ("dag", ["nobody.v1", "dag.common.v1", "dag.parked.v1"]),
        ]
        for analyzed in (False, True):
            if analyzed:
                c.execute("ANALYZE wf_tasks")
            for kind, types in cases:
                params: dict[str, Any] = {"types": types, "limit": 1, "worker": "w"}
                plan = "\n".join(
                    r[0]
                    for r in c.execute(
                        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + picks[kind], params
                    ).fetchall()
                )
                what = f"{kind} {types} analyzed={analyzed}\n{plan}"
                # wf_locks (one row per held lock) is read whole on purpose; wf_tasks never.
                assert "Seq Scan on wf_tasks" not in plan, what
                # Whatever is sorted is a few candidates, never the due backlog.
                sorted_rows = [int(n) for n in re.findall(r"Sort .*?rows=(\d+)", plan)]
                assert max(sorted_rows, default=0) <= 16 + 17 * len(types), what
                # The top node's count includes its children's: the whole statement's reads.
                top = plan.split("Planning")[0]
                hits = max(int(n) for n in re.findall(r"shared hit=(\d+)", top))
                # 16 holders' unique-key lookups (4 pages each), 17 candidates fetched
                # by id (3 each), and per type a walk of up to 17 due rows: a few hundred
                # pages at most, of the table's 770, whatever the backlog.
                assert hits < 200 + 15 * len(types), f"{hits} pages read: {what}"
                # The idle loop's next due time: the first task of each type, read off
                # (type, due_at), not a sort of the type's 25,000 (swf_first_due).
                c.execute(queries("postgres")["next_due"], params)  # compiled once
                plan = "\n".join(
                    r[0]
                    for r in c.execute(
                        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "
                        + queries("postgres")["next_due_kinds"],
                        {"types": types, "dag": [], "worker": ""}
                        if kind == "machine"
                        else {"types": [], "dag": types, "worker": "w"},  # as a DAG runner
                    ).fetchall()
                )
                hits = max(
                    int(n) for n in re.findall(r"shared hit=(\d+)", plan.split("Planning")[0])
                )
                assert hits < 40 + 5 * len(types), f"next_due: {hits} pages read: {what}\n{plan}"
        tables = c.execute("SELECT pg_relation_size('wf_tasks') / 8192").fetchone()
        assert tables is not None
        assert tables[0] > 300  # so reading the table would have shown


def test_sqlite_claim_walks_one_types_index_and_never_the_table(tmp_path: Any) -> None:
    """SQLite: the claim's picks (state machines and DAG nodes) walk wf_tasks_type_pick
    per type and stop at the limit; no statement of either claim scans wf_tasks or sorts
    its due rows (it sorted every due task per claim: bench/README.md, "Claim and
    backlog"). And with 3,000 due tasks of another type, ours come first, in order."""
    import json
    import sqlite3
    import time

    from statemachine_wf.stores._sqliteconn import _SCRIPTS
    from statemachine_wf.stores.sqlite import SQLiteStore

    path = str(tmp_path / "swf.db")
    store = SQLiteStore(path)
    store.migrate()
    for _ in range(3000):
        store.create(NewInstance(id=str(uuid.uuid4()), type="other.v1", input={}, initial="go"))
    mine = [
        store.create(
            NewInstance(
                id=str(uuid.uuid4()), type="mine.v1", input={"n": n}, initial="go", priority=p
            )
        )[0]
        for n, p in enumerate((100, 100, 50))
    ]
    conn = sqlite3.connect(path)
    params: dict[str, Any] = {
        "now": time.time(), "types": json.dumps(["mine.v1"]), "limit": 2, "worker": "w",
        "token": "t", "lease": 60.0,
    }  # fmt: skip
    for statement, _guard, _sets in _SCRIPTS["claim_scratch"]:  # its scratch table
        conn.execute(statement)
    for name in ("claim", "dag_claim"):
        for statement, _guard, _sets in _SCRIPTS[name]:
            if statement.lstrip().upper().startswith(("CREATE", "DELETE FROM TEMP")):
                continue
            plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + statement, params)]
            text = "\n".join(plan)
            assert not any(re.fullmatch(r"SCAN (wf_tasks|t|w|t2|m)\b.*", p) for p in plan), text
            if "ORDER BY w.priority, w.due_at" in statement:
                assert "USING INDEX wf_tasks_type_pick (type=?)" in text, text
            if "AS more" in statement:  # the first due row per type, off (type, due_at)
                assert "USING INDEX wf_tasks_type_due (type=? AND due_at<?)" in text, text
    conn.close()
    claims = store.claim(worker="w", types=["mine.v1"], lease=60, limit=2)
    assert [c.instance.id for c in claims] == [mine[2], mine[0]]  # priority, then due time
    store.close()
