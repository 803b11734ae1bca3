"""A DAG loop whose body has a side effect, made safe to repeat with an idempotency key.

    python -m examples.dag_loop [sqlite:///path.db]

The graph: ``start -> each (loop over the input's amounts) -> charge -> back to each``,
and ``each --done--> end``. ``charge`` calls a (simulated) payment API that remembers
the keys it has seen, as real payment APIs do: the node passes
``node_context().idempotency_key`` (instance, node and run -- one run per iteration), so
a try that is repeated (a retry, or a re-run after a worker died before its result was
recorded) charges once. The second iteration fails once after charging, to show it: its
retry keeps the key and the API answers with the first charge.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

from statemachine_wf import Runner, RunnerOptions
from statemachine_wf.dag import (
    DagBuilder,
    DagClient,
    DagDefinition,
    NodeRetry,
    Registry,
    node_context,
)
from statemachine_wf.stores import open_store

registry = Registry()


class PaymentApi:
    """Stands in for an external API that deduplicates on an idempotency key."""

    def __init__(self) -> None:
        self.charges: dict[str, int] = {}
        self._lock = threading.Lock()

    def charge(self, key: str, amount: int) -> str:
        with self._lock:
            if key not in self.charges:
                self.charges[key] = amount
            return f"charge-{len(self.charges)}:{self.charges[key]}"


api = PaymentApi()
failed_once: set[str] = set()


@registry.function("charge")
def charge(amount: int, index: int) -> str:
    here = node_context()
    receipt = api.charge(here.idempotency_key, amount)
    print(f"iteration {index}: run {here.run}, try {here.attempt}, key {here.idempotency_key}")
    if index == 1 and here.idempotency_key not in failed_once:
        failed_once.add(here.idempotency_key)  # charged, then the connection drops
        raise ConnectionError("lost the answer after charging")
    return receipt


def charges() -> DagDefinition:
    b = DagBuilder("charges")
    b.node("start", "start")
    b.node("each", "loop", items="{{ctx.input.amounts}}")
    b.node(
        "charge",
        "python",
        function="charge",
        args={"amount": "{{ctx.each.item}}", "index": "{{ctx.each.index}}"},
        retry=NodeRetry(max_attempts=3, initial_delay=0.05),
    )
    b.node("end", "end", outputs={"receipts": "{{ctx.each.results}}", "n": "{{ctx.each.count}}"})
    b.edge("start", "each")
    b.edge("each", "charge", handle="loop")
    b.edge("charge", "each")
    b.edge("each", "end", handle="done")
    return b.build()


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else None
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(url or f"sqlite:///{Path(tmp) / 'loop.db'}")
        store.migrate()
        client = DagClient(store)
        run = client.start(charges(), {"amounts": [10, 20, 30]})
        Runner(store, [], dags=registry, options=RunnerOptions(concurrency=2)).run_until_idle(
            timeout=30, settle=0.5
        )
        print(client.get(run).status, client.output(run))
        print("charges made:", len(api.charges))
        store.close()


if __name__ == "__main__":
    main()
