"""A DAG workflow, defined twice (editor JSON and Python), run on a SQLite file.

    python -m examples.dag_orders [sqlite:///path.db]

The graph: fetch an order, then in parallel price it and check stock; join both (all),
branch on the total, wait a (durable) moment for big orders, and finish with the
workflow output collected by the end node.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from statemachine_wf import Runner, RunnerOptions
from statemachine_wf.dag import DagBuilder, DagClient, DagDefinition, Registry, load
from statemachine_wf.stores import open_store

registry = Registry()


@registry.function("fetch_order")
def fetch_order(order_id: int) -> dict[str, object]:
    return {"id": order_id, "items": [{"sku": "A", "qty": 2}, {"sku": "B", "qty": 30}]}


@registry.function("price")
async def price(items: list[dict[str, int]]) -> int:
    return sum(line["qty"] * 10 for line in items)


@registry.function("in_stock")
def in_stock(items: list[dict[str, int]]) -> bool:
    return all(line["qty"] <= 50 for line in items)


@registry.function("summarise")
def summarise(order: dict[str, object], total: int, ok: bool, route: str) -> str:
    return f"order {order['id']}: total {total}, in stock {ok}, {route}"


# The editor's JSON, in a file of its own: `statemachine-wf dag save examples/dag_orders.json`
# saves it from the command line (the README's Running section).
ORDER_JSON = (Path(__file__).parent / "dag_orders.json").read_text()


def built_in_python() -> DagDefinition:
    """The same kind of graph, written in Python: a fan-out and an AND join."""
    b = DagBuilder("orders_py")
    b.node("start", "start")
    b.node(
        "fetch",
        "python",
        function="fetch_order",
        args={"order_id": "{{ctx.input.order_id}}"},
        output_variable="order",
    )
    b.node("price", "python", function="price", args={"items": "{{ctx.order.items}}"})
    b.node("stock", "python", function="in_stock", args={"items": "{{ctx.order.items}}"})
    b.node("end", "end", outputs={"total": "{{ctx.price}}", "ok": "{{ctx.stock}}"})
    b.chain("start", "fetch", "price", "end")
    b.chain("fetch", "stock", "end")
    return b.build()


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else None
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(url or f"sqlite:///{Path(tmp) / 'dag.db'}")
        store.migrate()
        client = DagClient(store)
        version = client.save(ORDER_JSON)
        print(f"saved 'orders' version {version}")
        first = client.start("orders", {"order_id": 7})
        second = client.start(load(ORDER_JSON), {"order_id": 8}, idempotency_key="order-8")
        third = client.start(built_in_python(), {"order_id": 9})
        Runner(store, [], dags=registry, options=RunnerOptions(concurrency=4)).run_until_idle(
            timeout=30, settle=0.5
        )
        for iid in (first, second, third):
            print(client.get(iid).status, client.output(iid))
        print("node runs:", client.executions(first))
        store.close()


if __name__ == "__main__":
    main()
