"""The ``statemachine-wf`` command.

    statemachine-wf [--db URL] [--schema S] [-m MODULE ...] COMMAND ...

Commands: migrate, worker, start, status, history, graph, list, cancel, resume, retry,
verify, rebuild, dead-letters (list, show, redrive), delete, purge, signal, signals.
Workflow classes come from the modules named with ``-m`` (or ``SWF_MODULES``), resolved
from the current directory first (as ``python -m``, uvicorn and celery do); every
``Workflow`` subclass defined in a named module, or for a package in any of its modules,
is hosted. ``worker --dag-registry MODULE:ATTR`` also runs DAG instances with that
:class:`~statemachine_wf.dag.Registry`.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import json
import logging
import os
import pkgutil
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from .audit import lifecycle
from .client import Client
from .config import Config
from .errors import UnknownWorkflowType, WorkflowError
from .events import Status
from .inbox import parse_duration
from .limits import MAX_JSON_DEPTH, nests_deeper
from .redact import redact_url
from .runner import Runner, RunnerOptions
from .store import KIND_NAMES, Store, TypeKind
from .stores import open_store
from .workflow import Workflow

if TYPE_CHECKING:
    from .dag.handlers import Registry

log = logging.getLogger("statemachine_wf.cli")


DESCRIPTION = (
    "Run and operate statemachine_wf workflows: a worker that runs them, and commands to "
    "start, inspect, repair and clean up their instances."
)


def load_workflows(modules: Sequence[str]) -> list[type[Workflow[Any, Any]]]:
    """Every concrete ``Workflow`` subclass defined in these modules.

    A module that is a package is searched with all its modules (imported, except
    ``__main__``). A module in which nothing is found is an error that says where it
    looked, so a typo never starts a worker that runs nothing.
    """
    found: dict[str, type[Workflow[Any, Any]]] = {}
    for name in modules:
        module = _import(name, "-m")
        searched = [module]
        if hasattr(module, "__path__"):  # a package: search its modules too
            for info in pkgutil.walk_packages(module.__path__, prefix=f"{name}."):
                if info.name.rsplit(".", 1)[-1] != "__main__":
                    searched.append(importlib.import_module(info.name))
        here = {
            obj.spec().workflow_type: obj
            for m in searched
            for _, obj in inspect.getmembers(m, inspect.isclass)
            if issubclass(obj, Workflow)
            and obj.__module__ == m.__name__
            and "__swf_spec__" in obj.__dict__
        }
        if not here:
            where = ", ".join(m.__name__ for m in searched)
            raise ValueError(
                f"-m {name}: no Workflow subclass is defined in {where} "
                f"({getattr(module, '__file__', None) or name}); name the module that "
                "defines your workflows (-m package.module)"
            )
        found.update(here)
    return list(found.values())


def _import(name: str, flag: str) -> Any:
    """Import ``name`` for ``flag``; a module that does not exist is a clear error."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (name == exc.name or name.startswith(f"{exc.name}.")):
            raise  # the module exists; something it imports does not: show the traceback
        raise ValueError(
            f"{flag} {name}: no module named {exc.name!r} (looked in the current directory "
            f"{os.getcwd()} and on sys.path)"
        ) from exc


def _cwd_on_path() -> None:
    """Resolve ``-m`` and ``--deps`` from the current directory first, as ``python -m``,
    uvicorn and celery do (an installed console script starts with its bin directory
    first on ``sys.path`` instead)."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


class _Help(argparse.HelpFormatter):
    """Shows each option's default, unless its help already says it or there is none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if "default" in text or default is None or default is False or default == []:
            return text
        if isinstance(default, str) and "://" in default and not default.startswith("sqlite"):
            default = redact_url(default)  # a store URL from the env may hold a password
        return f"{text} (default: {default})"


def _parser() -> argparse.ArgumentParser:
    env = Config.from_env()
    p = argparse.ArgumentParser(
        prog="statemachine-wf", description=DESCRIPTION, formatter_class=_Help
    )
    p.add_argument("--db", default=env.database_url, help="store URL (env SWF_DATABASE_URL)")
    p.add_argument(
        "--schema",
        default=None,
        help=f"PostgreSQL schema (env SWF_PG_SCHEMA; default: {env.schema})",
    )
    p.add_argument(
        "-m",
        "--module",
        action="append",
        default=list(env.modules),
        help="module or package defining workflows, imported from the current directory "
        "first (repeatable; env SWF_MODULES)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log at INFO level (-vv: DEBUG); by default only warnings and errors",
    )
    sub = p.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=text, formatter_class=_Help)

    command("migrate", "create or upgrade the tables")

    w = command("worker", "resume everything, then run workflows until SIGTERM")
    w.add_argument(
        "--concurrency",
        type=int,
        default=env.concurrency,
        help="instances driven at once, one thread each (env SWF_CONCURRENCY)",
    )
    w.add_argument(
        "--lease",
        type=float,
        default=env.lease,
        help="seconds a claim lasts without a heartbeat (env SWF_LEASE)",
    )
    w.add_argument(
        "--prefix",
        action="append",
        default=list(env.prefixes),
        dest="prefixes",
        help="only types starting with this (repeatable; env SWF_PREFIXES; default: all hosted)",
    )
    w.add_argument(
        "--id",
        default=env.worker_id,
        dest="worker_id",
        help="a stable worker id (env SWF_WORKER_ID; default: host:pid:random)",
    )
    w.add_argument(
        "--until-idle",
        action="store_true",
        help="exit when nothing is due instead of running until SIGTERM",
    )
    w.add_argument(
        "--deps",
        default=env.deps,
        help="MODULE:FUNCTION returning the dependencies (a dict) the workflows declare, "
        "imported from the current directory first (env SWF_DEPS)",
    )
    w.add_argument(
        "--dag-registry",
        default=env.dag_registry,
        help="MODULE:ATTR naming a dag.Registry: also run DAG instances, calling its "
        "functions (env SWF_DAG_REGISTRY)",
    )
    w.add_argument(
        "--dag-type",
        action="append",
        dest="dag_types",
        help="task type of the DAG instances to run (repeatable; default swf.dag)",
    )

    s = command("start", "start a workflow; prints its id")
    s.add_argument("type", help="the workflow type, e.g. payments.payout.v1")
    s.add_argument("--input", required=True, help="input as JSON")
    s.add_argument("--key", help="idempotency key: the same key returns the first run's id")
    s.add_argument("--priority", type=int, default=100, help="lower runs first")
    s.add_argument("--delay", type=float, default=0.0, help="seconds before it may start")
    s.add_argument("--run-at", help="when it may start: ISO 8601 with a timezone")

    for name, text in [
        ("status", "show an instance"),
        ("history", "show an instance's event log"),
        ("cancel", "cancel an instance"),
        ("resume", "resume a STALLED instance now"),
        ("retry", "run a FAILED instance again from its failed step"),
        ("rebuild", "recompute an instance row from its log"),
        ("delete", "soft-delete a finished instance (hidden until purged)"),
    ]:
        c = command(name, text)
        c.add_argument("id", help="instance id")
        c.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "history":
            c.add_argument(
                "--lifecycle",
                action="store_true",
                help="only lifecycle events, named as in the inbox (created, leased+started, ...)",
            )

    g = command("graph", "print a workflow type's state graph (Mermaid)")
    g.add_argument("type", help="the workflow type")

    ls = command("list", "list instances, newest first")
    ls.add_argument(
        "--status",
        action="append",
        choices=[s.value for s in Status],
        help="only this status (repeatable; default: any)",
    )
    ls.add_argument("--type-prefix", help="only types starting with this (default: any)")
    ls.add_argument("--limit", type=int, default=50, help="at most this many rows")
    ls.add_argument("--offset", type=int, default=0, help="skip this many rows first")

    v = command("verify", "check that each row equals the fold of its log")
    v.add_argument("ids", nargs="*", help="instance ids (default: all, up to --limit)")
    v.add_argument("--limit", type=int, default=10_000, help="at most this many instances")

    dl = command("dead-letters", "list, show or redrive dead letters")
    dl.add_argument(
        "action", nargs="?", choices=["list", "show", "redrive"], default="list", help="what to do"
    )
    dl.add_argument("letter", nargs="?", type=int, help="dead letter id (show, redrive)")
    dl.add_argument("--limit", type=int, default=50, help="at most this many (list)")

    sg = command("signal", "send a signal to an instance; prints the signal's id")
    sg.add_argument("id", help="instance id")
    sg.add_argument("name", help="signal name (a step declares it)")
    sg.add_argument("--payload", default="null", help="payload as JSON")
    sg.add_argument("--token", help="the waiting token the signal is for")
    sg.add_argument("--delay", type=float, default=0.0, help="seconds before delivery")

    ss = command("signals", "signal counts per state (stale, dead, ...) and rows")
    ss.add_argument("id", nargs="?", help="one instance (default: all)")
    ss.add_argument("--list", action="store_true", help="also list the rows, newest first")
    ss.add_argument("--limit", type=int, default=50, help="at most this many rows")
    ss.add_argument("--json", action="store_true", help="machine-readable output")

    pg = command("purge", "delete finished instances older than an age")
    pg.add_argument("--older-than", required=True, help="age: 30d, 12h, 15m, 90s")
    pg.add_argument("--batch", type=int, default=1000, help="instances per transaction")
    pg.add_argument("--soft", action="store_true", help="only mark them deleted")
    pg.add_argument(
        "--dead-letters",
        action="store_true",
        help="also delete dead letters older than the age, redriven or not",
    )
    return p


LOG_LEVELS = (logging.WARNING, logging.INFO, logging.DEBUG)


def main(argv: Sequence[str] | None = None) -> int:
    _cwd_on_path()
    try:
        args = _parser().parse_args(argv)
    except ValueError as exc:  # a bad SWF_* setting
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=LOG_LEVELS[min(args.verbose, len(LOG_LEVELS) - 1)],
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
    if not args.db.startswith("postgres"):
        return open_store(args.db, schema=args.schema)
    # The pool settings come from SWF_PG_* like everything else; --schema wins over the env.
    options = Config.from_env().store_options()
    options.pop("schema", None)
    return open_store(args.db, schema=args.schema, **options)


def _run(args: argparse.Namespace) -> int:
    workflows = load_workflows(args.module)
    if workflows:
        log.debug(
            "hosting %s from %s",
            ", ".join(sorted(w.spec().workflow_type for w in workflows)),
            ", ".join(args.module),
        )
    store = _open(args)
    client = Client(store, workflows)
    cmd = args.command
    if cmd == "migrate":
        print(f"schema at version {store.migrate()}")
        if workflows:  # declare them for SQL producers before any runner starts
            store.register_types([w.spec().workflow_type for w in workflows], by="migrate")
    elif cmd == "worker":
        dags = _dag_registry(args.dag_registry)
        if not workflows and dags is None:
            raise ValueError(
                "nothing to run: name workflow modules with -m (SWF_MODULES) "
                "or a DAG registry with --dag-registry (SWF_DAG_REGISTRY)"
            )
        if args.dag_types and dags is None:
            raise ValueError("--dag-type needs --dag-registry")
        options = RunnerOptions(
            concurrency=args.concurrency,
            lease=args.lease,
            prefixes=tuple(args.prefixes),
            worker_id=args.worker_id,
        )
        if args.dag_types:
            options = dataclasses.replace(options, dag_types=tuple(args.dag_types))
        runner = Runner(
            store,
            workflows,
            dependencies=_dependencies(args.deps),
            options=options,
            dags=dags,
        )
        if args.until_idle:
            runner.run_until_idle(timeout=3600)
        else:
            runner.run()
    elif cmd == "start":
        data = _json_arg("--input", args.input)
        if args.type not in client.classes:
            raise UnknownWorkflowType(args.type, list(client.classes))
        run_at = None
        if args.run_at is not None:  # an empty --run-at is a mistake, not "now"
            try:
                run_at = datetime.fromisoformat(args.run_at)
            except ValueError as exc:
                raise ValueError(f"--run-at is not an ISO 8601 time: {exc}") from exc
        print(
            client.start(
                args.type,
                data,
                idempotency_key=args.key,
                priority=args.priority,
                delay=args.delay,
                run_at=run_at,
            )
        )
    elif cmd == "status":
        r = client.get(args.id)
        kind: TypeKind = "dag" if r.kind == "dag" else "machine"
        hosted = r.status.terminal or r.type in store.registered_types(kind)
        if args.json:
            print(json.dumps({**_record_dict(r), "hosted": hosted}, indent=2))
        else:
            print(f"{r.id}  {r.type}  {r.status}  step={r.step} attempt={r.step_attempts}")
            print(f"  progress: {json.dumps(r.progress)}")
            if r.error:
                print(f"  error: {json.dumps(r.error)}")
            if r.cancel_requested and not r.status.terminal:
                print("  cancel requested")
            if not hosted:
                print(
                    f"  no runner has registered the {KIND_NAMES[kind]} type {r.type!r}: "
                    "it waits until one that hosts it starts"
                )
            wait = r.wait
            if wait is not None:
                what = f"signal {wait.get('name')!r}" if wait.get("kind") == "signal" else "timer"
                until = wait.get("until")
                deadline = "no deadline" if until is None else f"until {_when(until)} UTC"
                print(f"  waiting for {what} ({deadline})")
    elif cmd == "history":
        events = client.history(args.id)
        if args.lifecycle:
            for name, e in lifecycle(events):
                who = f" by {e.worker}" if e.worker else ""
                print(f"{e.seq:>8} {_when(e.created_at)} {name} ({e.event_type}){who}")
        elif args.json:
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
        if args.limit < 0 or args.offset < 0:
            raise ValueError("--limit and --offset must be >= 0")
        status = [Status(s) for s in args.status] if args.status else None
        rows = client.list(
            status=status, type_prefix=args.type_prefix, limit=args.limit, offset=args.offset
        )
        for r in rows:
            print(f"{r.id}  {r.type:<32} {r.status:<10} {r.step}")
        shown = args.offset + len(rows)
        if len(rows) == args.limit or args.offset:
            total = client.count(status=status, type_prefix=args.type_prefix)
            if not rows:
                print(f"showing none of {total} (--offset {args.offset})", file=sys.stderr)
            elif shown < total or args.offset:
                print(
                    f"showing {args.offset + 1}-{shown} of {total}; see more with --limit/--offset",
                    file=sys.stderr,
                )
    elif cmd in ("cancel", "resume", "retry"):
        r = getattr(client, cmd)(args.id)
        note = (
            " (cancel requested; stops at the running step's end)"
            if (cmd == "cancel" and not r.status.terminal)
            else ""
        )
        print(f"{r.id}  {r.status}{note}")
    elif cmd == "verify":
        ids = args.ids or [r.id for r in client.list(limit=args.limit)]
        bad = 0
        for instance_id in ids:
            diff = client.verify(instance_id)
            if diff:
                bad += 1
                print(f"{instance_id}: row differs from its log: {diff}")
        print(f"verified {len(ids)} instance(s): {bad} differ")
        if not args.ids and len(ids) == args.limit and client.count() > args.limit:
            print(f"stopped at --limit {args.limit}; {client.count()} in all", file=sys.stderr)
        return 1 if bad else 0
    elif cmd == "rebuild":
        projection = client.rebuild(args.id)
        print(f"{args.id} rebuilt: {projection.status} at {projection.step}")
    elif cmd == "dead-letters":
        _dead_letters(client, args)
    elif cmd == "delete":
        client.delete(args.id)
        print(f"{args.id} deleted (hidden until purged)")
    elif cmd == "purge":
        age = parse_duration(args.older_than)
        if args.soft and args.dead_letters:
            raise ValueError("--soft applies to instances only; dead letters are deleted")
        n = client.purge(older_than=age, batch_size=args.batch, soft=args.soft)
        print(f"{'marked deleted' if args.soft else 'purged'} {n} finished instance(s)")
        if args.dead_letters:
            letters = client.purge_dead_letters(older_than=age, batch_size=args.batch)
            print(f"purged {letters} dead letter(s)")
    elif cmd == "signal":
        payload = _json_arg("--payload", args.payload)
        print(client.signal(args.id, args.name, payload, token=args.token, delay=args.delay))
    elif cmd == "signals":
        _signals(client, store, args)
    store.close()
    return 0


def _json_arg(flag: str, text: str) -> Any:
    """``text`` decoded as JSON, or a ValueError naming ``flag`` and the problem.

    JSON nested deeper than the library takes (:data:`~statemachine_wf.limits.MAX_JSON_DEPTH`)
    is refused before it is decoded: Python's decoder recurses, so it raises a
    RecursionError near the recursion limit, or with the limit raised (``py_ecc``, which
    the chain workflows import, sets 100,000) overflows the C stack and crashes. An
    integer of more digits than Python converts is refused by name too.
    """
    if nests_deeper(text, MAX_JSON_DEPTH):
        raise ValueError(
            f"{flag} nests deeper than {MAX_JSON_DEPTH} levels (the limit); nothing was written"
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag} is not JSON: {exc}") from exc
    except RecursionError:  # not expected past the depth check; never a traceback
        raise ValueError(f"{flag} nests too deep to decode; nothing was written") from None
    except ValueError as exc:  # the only other: an integer longer than Python converts
        reason = str(exc).split(":", 1)[0]  # "Exceeds the limit (4300 digits) for ..."
        raise ValueError(
            f"{flag} holds an integer too large to store ({reason}); nothing was written"
        ) from exc


def _signals(client: Client, store: Store, args: argparse.Namespace) -> None:
    counts = client.signal_counts(args.id)
    rows = store.signals(instance_id=args.id, limit=args.limit) if args.list else []
    if args.json:
        out: dict[str, Any] = {"counts": counts}
        if args.list:
            out["signals"] = [
                {
                    "id": r.id,
                    "instance_id": r.instance_id,
                    "kind": r.kind,
                    "name": r.name,
                    "state": r.state,
                    "tokened": r.token is not None,
                    "due_at": r.due_at,
                    "payload": r.payload,
                }
                for r in rows
            ]
        print(json.dumps(out, indent=2))
        return
    print("  ".join(f"{k}={v}" for k, v in counts.items()))
    for r in rows:
        token = "token" if r.token else "no token"
        print(f"{r.id:>8} {_when(r.due_at)} {r.instance_id} {r.kind} {r.name!r} {r.state} {token}")


def _dead_letters(client: Client, args: argparse.Namespace) -> None:
    if args.action == "list":
        for d in client.dead_letters(limit=args.limit):
            mark = f"  (redriven {_when(d['redriven_at'])})" if d.get("redriven_at") else ""
            print(f"{d['id']:>6} {_when(d['created_at'])} {d['instance_id']}  {d['reason']}{mark}")
        return
    if args.letter is None:
        raise ValueError(f"dead-letters {args.action} needs a dead letter id")
    if args.action == "show":
        print(json.dumps(client.dead_letter(args.letter), indent=2, default=str))
        return
    r = client.redrive(args.letter)
    print(f"dead letter {r.letter_id}: {r.action}  instance {r.instance_id}")


def _dependencies(spec: str | None) -> dict[str, Any]:
    if not spec:
        return {}
    module_name, _, func_name = spec.partition(":")
    if not func_name:
        raise ValueError(f"--deps must be MODULE:FUNCTION, got {spec!r}")
    factory = getattr(_import(module_name, "--deps"), func_name, None)
    if not callable(factory):
        raise ValueError(f"--deps: module {module_name} has no function {func_name!r}")
    deps = factory()
    if not isinstance(deps, dict):
        raise ValueError(f"{spec} returned {type(deps).__name__}, not a dict")
    return deps


def _dag_registry(spec: str | None) -> Registry | None:
    """The ``dag.Registry`` instance named ``MODULE:ATTR``."""
    if not spec:
        return None
    from .dag.handlers import Registry  # only a DAG worker needs the DAG package

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--dag-registry must be MODULE:ATTR, got {spec!r}")
    found = getattr(_import(module_name, "--dag-registry"), attr, None)
    if found is None:
        raise ValueError(f"--dag-registry: module {module_name} has no attribute {attr!r}")
    if not isinstance(found, Registry):
        raise ValueError(f"--dag-registry: {spec} is a {type(found).__name__}, not a Registry")
    return found


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
        "waiting": r.wait,
    }


if __name__ == "__main__":
    sys.exit(main())
