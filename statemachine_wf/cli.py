"""The ``statemachine-wf`` command.

    statemachine-wf [--db URL] [--schema S] [-m MODULE ...] COMMAND ...

Commands: migrate, worker, start, status, history, graph, list, cancel, resume, retry,
verify, rebuild, dead-letters. Workflow classes come from the modules named with ``-m``
(or ``SWF_MODULES``); every ``Workflow`` subclass defined in them is hosted.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from .client import Client
from .config import Config
from .errors import UnknownWorkflowType, WorkflowError
from .events import Status
from .runner import Runner, RunnerOptions
from .store import Store
from .stores import open_store
from .workflow import Workflow


def load_workflows(modules: Sequence[str]) -> list[type[Workflow[Any, Any]]]:
    """Every concrete ``Workflow`` subclass defined in these modules."""
    found: dict[str, type[Workflow[Any, Any]]] = {}
    for name in modules:
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(obj, Workflow)
                and obj is not Workflow
                and obj.__module__ == module.__name__
                and "__swf_spec__" in obj.__dict__
            ):
                found[obj.spec().workflow_type] = obj
    return list(found.values())


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _parser() -> argparse.ArgumentParser:
    env = Config.from_env()
    p = argparse.ArgumentParser(prog="statemachine-wf", description=__doc__.split("\n")[0])
    p.add_argument("--db", default=env.database_url, help="store URL (env SWF_DATABASE_URL)")
    p.add_argument("--schema", default=env.schema, help="PostgreSQL schema (env SWF_PG_SCHEMA)")
    p.add_argument(
        "-m",
        "--module",
        action="append",
        default=list(env.modules),
        help="module defining workflows (repeatable; env SWF_MODULES)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("migrate", help="create or upgrade the tables")

    w = sub.add_parser("worker", help="resume everything, then run workflows until SIGTERM")
    w.add_argument("--concurrency", type=int, default=env.concurrency)
    w.add_argument("--lease", type=float, default=env.lease)
    w.add_argument("--prefix", action="append", default=list(env.prefixes), dest="prefixes")
    w.add_argument("--id", default=env.worker_id, dest="worker_id")
    w.add_argument("--until-idle", action="store_true", help="exit when nothing is due")
    w.add_argument(
        "--deps",
        help="MODULE:FUNCTION returning the dependencies (a dict) set on workflow objects",
    )

    s = sub.add_parser("start", help="start a workflow; prints its id")
    s.add_argument("type")
    s.add_argument("--input", required=True, help="input as JSON")
    s.add_argument("--key", help="idempotency key")
    s.add_argument("--priority", type=int, default=100)
    s.add_argument("--delay", type=float, default=0.0, help="seconds before it may start")

    for name, text in [
        ("status", "show an instance"),
        ("history", "show an instance's event log"),
        ("cancel", "cancel an instance"),
        ("resume", "resume a STALLED instance now"),
        ("retry", "run a FAILED instance again from its failed step"),
        ("rebuild", "recompute an instance row from its log"),
    ]:
        c = sub.add_parser(name, help=text)
        c.add_argument("id")
        c.add_argument("--json", action="store_true", help="machine-readable output")

    g = sub.add_parser("graph", help="print a workflow type's state graph (Mermaid)")
    g.add_argument("type")

    ls = sub.add_parser("list", help="list instances")
    ls.add_argument("--status", action="append", choices=[s.value for s in Status])
    ls.add_argument("--type-prefix")
    ls.add_argument("--limit", type=int, default=50)

    v = sub.add_parser("verify", help="check that each row equals the fold of its log")
    v.add_argument("ids", nargs="*", help="instance ids (default: all, up to --limit)")
    v.add_argument("--limit", type=int, default=10_000)

    dl = sub.add_parser("dead-letters", help="list dead letters")
    dl.add_argument("--limit", type=int, default=50)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose or args.command == "worker" else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return _run(args)
    except ValidationError as exc:
        print(f"error: invalid input: {exc}", file=sys.stderr)
        return 2
    except (WorkflowError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _open(args: argparse.Namespace) -> Store:
    options = {"schema": args.schema} if args.db.startswith("postgres") else {}
    return open_store(args.db, **options)


def _run(args: argparse.Namespace) -> int:
    store = _open(args)
    workflows = load_workflows(args.module)
    client = Client(store, workflows)
    cmd = args.command
    if cmd == "migrate":
        print(f"schema at version {store.migrate()}")
    elif cmd == "worker":
        if not workflows:
            raise ValueError("no workflows to run: name their modules with -m or SWF_MODULES")
        runner = Runner(
            store,
            workflows,
            dependencies=_dependencies(args.deps),
            options=RunnerOptions(
                concurrency=args.concurrency,
                lease=args.lease,
                prefixes=tuple(args.prefixes),
                worker_id=args.worker_id,
            ),
        )
        if args.until_idle:
            runner.run_until_idle(timeout=3600)
        else:
            runner.run()
    elif cmd == "start":
        try:
            data = json.loads(args.input)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--input is not JSON: {exc}") from exc
        if args.type not in client.classes:
            raise UnknownWorkflowType(args.type, list(client.classes))
        print(
            client.start(
                args.type, data, idempotency_key=args.key, priority=args.priority, delay=args.delay
            )
        )
    elif cmd == "status":
        r = client.get(args.id)
        if args.json:
            print(json.dumps(_record_dict(r), indent=2))
        else:
            print(f"{r.id}  {r.type}  {r.status}  step={r.step} attempt={r.step_attempts}")
            print(f"  progress: {json.dumps(r.progress)}")
            if r.error:
                print(f"  error: {json.dumps(r.error)}")
            if r.cancel_requested and not r.status.terminal:
                print("  cancel requested")
    elif cmd == "history":
        events = client.history(args.id)
        if args.json:
            print(json.dumps([_event_dict(e) for e in events], indent=2))
        else:
            for e in events:
                where = f" {e.node}#{e.attempt}" if e.node else ""
                extra = json.dumps(e.payload) if e.payload else ""
                err = f" error={e.error['code']}: {e.error['message']}" if e.error else ""
                print(f"{e.seq:>8} {_when(e.created_at)} {e.event_type}{where} {extra}{err}")
    elif cmd == "graph":
        cls = client.classes.get(args.type)
        if cls is None:
            raise UnknownWorkflowType(args.type, list(client.classes))
        print(cls.spec().mermaid(), end="")
    elif cmd == "list":
        rows = store.list_instances(
            status=[Status(s) for s in args.status] if args.status else None,
            type_prefix=args.type_prefix,
            limit=args.limit,
        )
        for r in rows:
            print(f"{r.id}  {r.type:<32} {r.status:<10} {r.step}")
    elif cmd in ("cancel", "resume", "retry"):
        r = getattr(client, cmd)(args.id)
        note = (
            " (cancel requested; stops at the running step's end)"
            if (cmd == "cancel" and not r.status.terminal)
            else ""
        )
        print(f"{r.id}  {r.status}{note}")
    elif cmd == "verify":
        ids = args.ids or [r.id for r in store.list_instances(limit=args.limit)]
        bad = 0
        for instance_id in ids:
            diff = client.verify(instance_id)
            if diff:
                bad += 1
                print(f"{instance_id}: row differs from its log: {diff}")
        print(f"verified {len(ids)} instance(s): {bad} differ")
        return 1 if bad else 0
    elif cmd == "rebuild":
        projection = client.rebuild(args.id)
        print(f"{args.id} rebuilt: {projection.status} at {projection.step}")
    elif cmd == "dead-letters":
        for d in store.dead_letters(limit=args.limit):
            print(f"{d['id']:>6} {d['instance_id']}  {d['reason']}")
    store.close()
    return 0


def _dependencies(spec: str | None) -> dict[str, Any]:
    if not spec:
        return {}
    module_name, _, func_name = spec.partition(":")
    if not func_name:
        raise ValueError(f"--deps must be MODULE:FUNCTION, got {spec!r}")
    factory = getattr(importlib.import_module(module_name), func_name)
    deps = factory()
    if not isinstance(deps, dict):
        raise ValueError(f"{spec} returned {type(deps).__name__}, not a dict")
    return deps


def _event_dict(e: Any) -> dict[str, Any]:
    return {
        "seq": e.seq,
        "event_type": e.event_type,
        "node": e.node,
        "attempt": e.attempt,
        "payload": e.payload,
        "error": e.error,
        "worker": e.worker,
        "created_at": e.created_at,
    }


def _record_dict(r: Any) -> dict[str, Any]:
    return {
        "id": r.id,
        "type": r.type,
        "status": str(r.status),
        "step": r.step,
        "step_attempts": r.step_attempts,
        "version": r.version,
        "input": r.input,
        "progress": r.progress,
        "error": r.error,
        "cancel_requested": r.cancel_requested,
    }


if __name__ == "__main__":
    sys.exit(main())
