"""The PostgreSQL store's statements are prepared on their first call and planned once.

psycopg prepares a query only at its fifth execution on a connection, and PostgreSQL under
``plan_cache_mode = auto`` then makes five custom plans before it settles on the generic
one: eleven plannings of each statement on each connection, a millisecond and more apiece
for the claim's CTEs. In a run of a thousand workflows that was a third of the server's
CPU (bench/README.md, "Session 37"). The store's connections now prepare every named
statement at its first call and run it with the generic plan (docs/architecture.md,
"Statements planned once per connection"). ``pg_prepared_statements`` counts each
statement's plans on the connection that ran it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql as psql
from pydantic import BaseModel

from statemachine_wf import COMPLETED, Client, Runner, RunnerOptions, StepContext, Workflow, step
from statemachine_wf.stores.postgres import PostgresStore


class In(BaseModel):
    n: int = 0


class Pr(BaseModel):
    pass


class Twice(Workflow[In, Pr]):
    workflow_type = "t.planned.v1"

    @step(initial=True, to="second")
    def first(self, ctx: StepContext[In, Pr]) -> None:
        pass

    @step(to=COMPLETED)
    def second(self, ctx: StepContext[In, Pr]) -> None:
        pass


def _plans(store: PostgresStore) -> list[dict[str, Any]]:
    with store._reading() as conn:
        rows = conn.execute(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
        ).fetchall()
    return list(rows)


@pytest.fixture
def one_connection(pg_dsn: str, pg_schema: str) -> Iterator[PostgresStore]:
    """A store of one pooled connection: every statement its callers send is on it."""
    store = PostgresStore(pg_dsn, schema=pg_schema, pool_size=1)
    store.migrate()
    yield store
    store.close()


def _run(store: PostgresStore) -> None:
    Runner(store, [Twice], options=RunnerOptions(concurrency=1)).run_until_idle(timeout=30)


def test_every_statement_is_prepared_at_its_first_call_and_never_custom_planned(
    one_connection: PostgresStore,
) -> None:
    client = Client(one_connection, [Twice])
    ids = [client.start(Twice, In(n=i)) for i in range(3)]
    _run(one_connection)
    assert [client.get(i).status for i in ids] == ["COMPLETED"] * 3
    plans = _plans(one_connection)
    texts = " ".join(p["statement"] for p in plans)
    # A create and a claim ran three times at most, a read once per instance: prepared
    # all the same (psycopg's own threshold is five calls).
    assert "INSERT INTO wf_instances" in texts, texts[:2000]
    assert "swf_pick" in texts, texts[:2000]
    assert plans
    custom = [(p["statement"][:120], p["custom_plans"]) for p in plans if p["custom_plans"]]
    assert custom == [], custom
    assert all(p["generic_plans"] >= 1 for p in plans), plans


def _add_column(pg_dsn: str, pg_schema: str, table: str) -> None:
    """Another process's migration: a column more on ``table``."""
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(
            psql.SQL("ALTER TABLE {}.{} ADD COLUMN upgraded integer").format(
                psql.Identifier(pg_schema), psql.Identifier(table)
            )
        )


def test_a_statement_prepared_before_another_process_adds_a_column_is_prepared_again(
    one_connection: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    client = Client(one_connection, [Twice])
    instance_id = client.start(Twice, In(n=1))
    assert one_connection.get(instance_id) is not None  # SELECT * FROM wf_instances
    _add_column(pg_dsn, pg_schema, "wf_instances")
    # PostgreSQL refuses the prepared statement now ("cached plan must not change result
    # type"); the store drops its statements and runs it prepared afresh.
    record = one_connection.get(instance_id)
    assert record is not None
    assert record.id == instance_id
    _run(one_connection)
    assert client.get(instance_id).status == "COMPLETED"


def test_inside_a_transaction_the_statement_fails_once_and_the_next_call_prepares_afresh(
    pg_dsn: str, pg_schema: str
) -> None:
    from statemachine_wf.stores._pgconn import execute

    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={pg_schema}") as conn:
        conn.execute(psql.SQL("CREATE SCHEMA {}").format(psql.Identifier(pg_schema)))
        conn.execute("CREATE TABLE t (id integer PRIMARY KEY, v integer)")
        conn.execute("INSERT INTO t VALUES (1, 10)")
        query = "SELECT * FROM t WHERE id = %(id)s"
        assert execute(conn, query, {"id": 1}).fetchall() == [(1, 10)]
        _add_column(pg_dsn, pg_schema, "t")
        # The transaction is lost with the statement (nothing more can run in it); psycopg,
        # rolling it back, drops the connection's prepared statements, so the next call
        # prepares afresh.
        with pytest.raises(psycopg.errors.FeatureNotSupported), conn.transaction():
            execute(conn, query, {"id": 1})
        with conn.transaction():
            assert execute(conn, query, {"id": 1}).fetchall() == [(1, 10, None)]
        assert execute(conn, query, {"id": 1}).fetchall() == [(1, 10, None)]
