"""A DAG runner process for the multi-process tests.

``python -m tests.integration.dag.worker_main DSN SCHEMA MARKS [CONCURRENCY [LEASE]]``: runs
every DAG node task of the schema (and the ``Child`` sub-workflow) until SIGTERM. The
``mark`` function (and each ``Child`` step) appends
``"<run> <name>"`` to MARKS for every execution (O_APPEND: one line per write, whole), so
the test counts real executions across processes.
"""

from __future__ import annotations

import os
import sys
import time

from statemachine_wf import Runner, RunnerOptions
from statemachine_wf.stores import open_store
from tests.integration.dag.helpers import Child, registry


def main() -> None:
    dsn, schema, marks = sys.argv[1], sys.argv[2], sys.argv[3]
    concurrency = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    lease = float(sys.argv[5]) if len(sys.argv) > 5 else 30.0

    @registry.function("mark")
    def mark(run: str, name: str, pause: float = 0.0) -> str:
        if pause:
            time.sleep(pause)  # a slow node, so a SIGKILL lands mid-node
        fd = os.open(marks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{run} {name}\n".encode())
        finally:
            os.close(fd)
        return name

    store = open_store(dsn, schema=schema) if dsn.startswith("postgres") else open_store(dsn)
    store.migrate()
    runner = Runner(
        store,
        [Child],  # the state machine DAGs run as a sub-workflow
        dags=registry,
        dependencies={"marks": marks},
        options=RunnerOptions(concurrency=concurrency, idle_poll=1.0, lease=lease),
    )
    print("READY", flush=True)
    runner.run()
    store.close()


if __name__ == "__main__":
    main()
