"""The claim's pick functions (migration 015) are planned once per connection, not on
every call (migration 020).

A plpgsql function's query is a prepared statement whose parameters are the function's
arguments. Left to ``plan_cache_mode = auto``, PostgreSQL kept re-planning the picks' walks
on every call, because a plan that knows the LIMIT always looks cheaper: 240 us of server
CPU a ``swf_pick`` where the generic plan costs 115 us (bench/README.md, "The pick
functions planned once"). auto_explain, loaded into the session and logging to the client,
shows the plan each call ran: a generic plan keeps the arguments as ``$n``, a custom one
has their values written in."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from statemachine_wf.core.store import NewInstance
from statemachine_wf.stores.postgres import PostgresStore

# Each function, a call of it, and the argument its generic plan shows as a parameter.
CALLS = {
    "swf_pick": ("SELECT * FROM swf_pick(ARRAY['mine.v1'], 'machine', 5)", "(kind = $2)"),
    "swf_first_due": ("SELECT swf_first_due(ARRAY['mine.v1'], 'machine')", "(kind = $2)"),
}


def _nested_plans(conn: psycopg.Connection[object], call: str, times: int) -> list[str]:
    """The plans auto_explain logged for the function's own query, call by call."""
    notes: list[str] = []
    conn.add_notice_handler(lambda d: notes.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute("SET client_min_messages = log")
    for _ in range(times):
        conn.execute(call).fetchall()
    return [n for n in notes if "FROM wf_tasks t" in n]


@pytest.mark.parametrize("function", sorted(CALLS))
def test_a_pick_function_runs_its_generic_plan_from_the_first_call(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str, function: str
) -> None:
    pg_store.create_many(
        [
            NewInstance(id=str(uuid.uuid4()), type="mine.v1", input={}, initial="go")
            for _ in range(50)
        ]
    )
    call, parameter = CALLS[function]
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={pg_schema}") as c:
        plans = _nested_plans(c, call, times=8)
    assert len(plans) == 8, plans
    # Under plan_cache_mode = auto the first five calls, and here every one, were custom
    # plans: 'machine'::text in place of $2.
    for plan in plans:
        assert parameter in plan, plan
        assert "'machine'::text" not in plan, plan


def test_every_pick_function_is_set_to_generic_plans(
    pg_store: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    pg_store.migrate()
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={pg_schema}") as c:
        rows = c.execute(
            "SELECT p.proname, p.proconfig FROM pg_proc p"
            " WHERE p.pronamespace = current_schema()::regnamespace"
            " AND p.proname IN ('swf_pick', 'swf_first_due', 'swf_dag_pick')"
        ).fetchall()
    # swf_dag_pick's generic plan shows no parameter to tell it by (its LIMIT's is not
    # printed), so its setting is read where it is kept.
    assert {name for name, _ in rows} == {"swf_pick", "swf_first_due", "swf_dag_pick"}
    for name, config in rows:
        assert "plan_cache_mode=force_generic_plan" in config, name
