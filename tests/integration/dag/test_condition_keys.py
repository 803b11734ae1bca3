"""A condition reads a node output or an input field named like a dict method (``items``,
``count``, ``get``...) as that value, in a real DAG run on SQLite."""

from __future__ import annotations

from statemachine_wf import Status
from statemachine_wf.dag import DagBuilder, DagClient, DagDefinition
from statemachine_wf.stores.sqlite import SQLiteStore

from . import helpers as h


def _definition() -> DagDefinition:
    b = DagBuilder("method_named_outputs")
    b.node("s", "start")
    h.py(b, "count_items", "add", a=1, b=2, output_variable="items")
    b.node(
        "c",
        "condition",
        branches=[
            {
                "handle": "yes",
                "when": "ctx.items == 3 and ctx.input.count == 2 and ctx.input.get == 'g'",
            }
        ],
    )
    h.py(b, "yes", "tag", name="yes", output_variable="which")
    h.py(b, "no", "tag", name="no", output_variable="which")
    b.node("e", "end", join="any", outputs={"which": "{{ctx.which}}", "items": "{{ctx.items}}"})
    b.chain("s", "count_items", "c")
    b.edge("c", "yes", handle="yes")
    b.edge("c", "no", handle="else")
    b.edge("yes", "e")
    b.edge("no", "e")
    return b.build()


def test_a_condition_reads_outputs_named_like_dict_methods(sqlite_store: SQLiteStore) -> None:
    client = DagClient(sqlite_store)
    with h.running(sqlite_store):
        iid = client.start(_definition(), {"count": 2, "get": "g"})
        record = client.wait(iid, timeout=30)
    assert record.status == Status.COMPLETED, record.error
    assert client.output(iid) == {"which": "yes", "items": 3}
