"""The ``statemachine-wf`` command.

    statemachine-wf [--db URL] [--schema S] [-m MODULE ...] COMMAND ...

Commands: migrate, worker, start, status, history, graph, list, cancel, resume, retry,
verify, rebuild, dead-letters (list, show, redrive), delete, purge, signal, signals,
signers, dashboard, dag (save, list, show, start, test-run, stop), top. Read commands
take ``--json``; on a terminal they print tables (:mod:`.output`).
Workflow classes come from the modules named with ``-m`` (or ``SWF_MODULES``), resolved
from the current directory first (as ``python -m``, uvicorn and celery do); every
``Workflow`` subclass defined in a named module, or for a package in any of its modules,
is hosted. ``worker --dag-registry MODULE:ATTR`` also runs DAG instances with that
:class:`~statemachine_wf.dag.Registry`.

This package holds ``main``, the argument parser and the dispatch to the commands; they
live in :mod:`.operating` (migrate, worker), :mod:`.instances` (the commands on
instances), :mod:`.inbox` (signals, dead letters), :mod:`.dag` (DAG definitions and
runs), :mod:`.top` (the live view), with :mod:`.output` (tables, JSON, progress bars),
:mod:`.loading` (modules, deps, registry, store) and :mod:`.formatting` (JSON arguments,
output) beside them. Every function and constant the single ``cli.py`` module defined is
importable from here as before.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from ..client.machine import Client
from ..definition.config import Config
from ..definition.events import Status
from ..definition.redact import redact_url
from ..errors import WorkflowError
from . import dag, dashboard, inbox, instances, operating, signers, top
from .formatting import _event_dict as _event_dict
from .formatting import _json_arg as _json_arg
from .formatting import _record_dict as _record_dict
from .formatting import _when as _when
from .inbox import _dead_letters, _signals
from .loading import _cwd_on_path, _open, load_workflows
from .loading import _dag_registry as _dag_registry
from .loading import _dependencies as _dependencies
from .loading import _import as _import

log = logging.getLogger("statemachine_wf.cli")


DESCRIPTION = (
    "Run and operate statemachine_wf workflows: a worker that runs them, and commands to "
    "start, inspect, repair and clean up their instances."
)


class _Help(argparse.HelpFormatter):
    """Shows each option's default, unless its help already says it or there is none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is False
            or default == []
            or default == argparse.SUPPRESS  # -h/--help
        ):
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
    p.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="json: one object a line, with instance_id, type, step and attempt",
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
    w.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics on this port (needs the observe extra)",
    )
    w.add_argument("--metrics-host", default="127.0.0.1", help="address the metrics server binds")

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

    rb = command("rebuild", "recompute instance rows from their logs")
    rb.add_argument("ids", nargs="*", metavar="id", help="instance ids")
    rb.add_argument(
        "--all",
        action="store_true",
        help="every instance (up to --limit), with a progress bar on a terminal",
    )
    rb.add_argument("--limit", type=int, default=1_000_000, help="at most this many (--all)")
    rb.add_argument("--json", action="store_true", help="machine-readable output")

    g = command("graph", "print a workflow type's state graph (Mermaid)")
    g.add_argument("type", help="the workflow type")
    g.add_argument("--json", action="store_true", help="machine-readable output")

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
    ls.add_argument("--json", action="store_true", help="machine-readable output")

    v = command("verify", "check that each row equals the fold of its log")
    v.add_argument("ids", nargs="*", help="instance ids (default: all, up to --limit)")
    v.add_argument("--limit", type=int, default=10_000, help="at most this many instances")
    v.add_argument("--json", action="store_true", help="machine-readable output")

    dl = command("dead-letters", "list, show or redrive dead letters")
    dl.add_argument(
        "action", nargs="?", choices=["list", "show", "redrive"], default="list", help="what to do"
    )
    dl.add_argument("letter", nargs="?", type=int, help="dead letter id (show, redrive)")
    dl.add_argument("--limit", type=int, default=50, help="at most this many (list)")
    dl.add_argument("--json", action="store_true", help="machine-readable output")

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

    sq = command(
        "signers",
        "each busy signer's transaction queue: slot holder, waiting instances, last nonce, "
        "pending hash and its age (read from the store; idle signers are not listed)",
    )
    sq.add_argument("--chain-id", type=int, help="only this chain (default: every chain)")
    sq.add_argument("--json", action="store_true", help="machine-readable output")

    pg = command("purge", "delete finished instances older than an age")
    pg.add_argument("--older-than", required=True, help="age: 30d, 12h, 15m, 90s")
    pg.add_argument("--batch", type=int, default=1000, help="instances per transaction")
    pg.add_argument("--soft", action="store_true", help="only mark them deleted")
    pg.add_argument(
        "--dead-letters",
        action="store_true",
        help="also delete dead letters older than the age, redriven or not",
    )
    pg.add_argument("--json", action="store_true", help="machine-readable output")
    db = command("dashboard", "serve the web dashboard (read-only without an operator token)")
    # Loopback by default: the read pages need no sign-in and show every instance's input,
    # progress and errors, so exposing them is a choice made with --host.
    db.add_argument("--host", default="127.0.0.1", help="address to bind")
    db.add_argument("--port", type=int, default=8765, help="port to listen on")
    # The help text must keep the word "default": _Help then prints no default value,
    # and the default here is the secret itself.
    db.add_argument(
        "--operator-token",
        default=env.operator_token,
        help="the secret that enables cancel/resume/retry/signal/redrive "
        "(env SWF_OPERATOR_TOKEN; default: none, read-only)",
    )
    db.add_argument(
        "--session-max-age",
        type=float,
        default=env.dashboard_session_max_age,
        metavar="SECONDS",
        help="how long an operator's sign-in lasts (env SWF_DASHBOARD_SESSION_MAX_AGE)",
    )
    # The CLI tools: DAG definitions from files, and the live terminal view.
    dag.add_parser(command, env)
    top.add_parser(command)
    return p


LOG_LEVELS = (logging.WARNING, logging.INFO, logging.DEBUG)


# Exit codes: 0 done; 2 for argparse's usage errors and for every ValueError or
# WorkflowError (a bad setting or input, a refusal, the store unreachable), printed as one
# "error: ..." line without a traceback; 1 from verify when rows differ, and from Python
# itself for an unexpected exception, whose traceback is then the report.
def main(argv: Sequence[str] | None = None) -> int:
    _cwd_on_path()
    try:
        args = _parser().parse_args(argv)
    except ValueError as exc:  # a bad SWF_* setting
        print(f"error: {exc}", file=sys.stderr)
        return 2
    operating.configure_logging(LOG_LEVELS[min(args.verbose, len(LOG_LEVELS) - 1)], args.log_format)
    try:
        return _run(args)
    except BrokenPipeError:  # `... | head`: the reader left; not an error to report
        # stdout to /dev/null: the interpreter flushes stdout at exit, and that flush would
        # raise BrokenPipeError again, with a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    # Before ValueError, which pydantic's ValidationError also is: a model mismatch gets
    # its own prefix.
    except ValidationError as exc:
        print(f"error: invalid input: {exc}", file=sys.stderr)
        return 2
    except (WorkflowError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    # Modules before the store: a typo in -m fails without touching the database.
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
        operating.migrate(store, workflows)
    elif cmd == "worker":
        operating.worker(store, workflows, args)
    elif cmd == "start":
        instances.start(client, args)
    elif cmd == "status":
        instances.status(client, store, args)
    elif cmd == "history":
        instances.history(client, args)
    elif cmd == "graph":
        instances.graph(client, args)
    elif cmd == "list":
        instances.listing(client, args)
    elif cmd in ("cancel", "resume", "retry"):
        instances.control(client, cmd, args)
    elif cmd == "verify":
        # Its exit code says whether rows differ; it returns before store.close() below,
        # as it did before the split.
        return instances.verify(client, args)
    elif cmd == "rebuild":
        instances.rebuild(client, args)
    elif cmd == "dead-letters":
        _dead_letters(client, args)
    elif cmd == "delete":
        instances.delete(client, args)
    elif cmd == "purge":
        instances.purge(client, args)
    elif cmd == "signal":
        inbox.signal(client, args)
    elif cmd == "signals":
        _signals(client, store, args)
    elif cmd == "signers":
        signers.signers(client, args)
    elif cmd == "dashboard":
        dashboard.dashboard(store, workflows, args)
    elif cmd == "dag":
        dag.run(store, args)
    elif cmd == "top":
        top.top(store, args)
    store.close()
    return 0
