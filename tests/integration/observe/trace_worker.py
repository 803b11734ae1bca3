"""Run a worker in this process and print its spans as JSON (the cross-process test).

python -m tests.integration.observe.trace_worker URL [SCHEMA]
"""

from __future__ import annotations

import json
import sys

from statemachine_wf import Runner
from statemachine_wf.stores import open_store

from .flows import Twice
from .tracing import EXPORTER


def main() -> None:
    url = sys.argv[1]
    options = {"schema": sys.argv[2]} if len(sys.argv) > 2 else {}
    store = open_store(url, **options)
    Runner(store, [Twice]).run_until_idle(timeout=60)
    store.close()
    out = []
    for span in EXPORTER.get_finished_spans():
        ctx, parent = span.context, span.parent
        out.append(
            {
                "name": span.name,
                "trace_id": ctx.trace_id,
                "parent": None if parent is None else parent.span_id,
                "attributes": dict(span.attributes or {}),
            }
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
