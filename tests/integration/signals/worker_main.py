"""A runner process hosting the signal test workflows; serves until SIGTERM or SIGKILL.

    python worker_main.py --url URL [--schema S] --ledger SPEC --worker-id ID
        [--lease 1.0] [--concurrency 2] [--kill op:when:k]

Same command line as ``tests/integration/crash/worker_main.py`` (``--ledger`` is accepted
and unused; ``--kill`` is its kill switch), so the crash harness's :class:`Children`
starts it. Prints ``READY <id>``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from statemachine_wf.runtime.runner import Runner, RunnerOptions
from statemachine_wf.stores.postgres import PostgresStore
from statemachine_wf.stores.sqlite import SQLiteStore
from tests.integration.crash.worker_main import KillSwitch, killing_store
from tests.integration.signals.workflows import WORKFLOWS


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--schema")
    p.add_argument("--ledger")
    p.add_argument("--worker-id", required=True)
    p.add_argument("--lease", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--kill")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format=f"%(asctime)s {args.worker_id} %(message)s")
    switch = KillSwitch(args.kill)
    if args.url.startswith("sqlite:///"):
        store = killing_store(SQLiteStore, switch)(args.url.removeprefix("sqlite:///"))
    else:
        store = killing_store(PostgresStore, switch)(args.url, schema=args.schema)
    store.migrate()
    runner = Runner(
        store,
        WORKFLOWS,
        options=RunnerOptions(
            concurrency=args.concurrency, lease=args.lease, worker_id=args.worker_id
        ),
    )
    print(f"READY {args.worker_id}", flush=True)
    try:
        runner.run()
    finally:
        store.close()


if __name__ == "__main__":
    main()
