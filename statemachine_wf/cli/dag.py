"""``statemachine-wf dag ...``: DAG definitions from JSON files, and their runs.

``save FILE`` (``-``: stdin) validates and stores the next version of the definition's
name; ``list`` the saved names with their latest version; ``show NAME [--version N]`` one
version; ``start NAME --input JSON`` a run of a saved version; ``test-run FILE|NAME`` an
unsaved run (a file, else the saved definition of that name), deleted by ``stop ID``.
Each is what :class:`~statemachine_wf.client.dag.DagClient` does from Python; a definition
is refused whole (every problem listed, nothing stored) as ``DagClient.save`` refuses it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rich.text import Text

from ..client.dag import DagClient
from ..core.store import Store
from ..definition.config import Config
from ..definition.dag_definition import DagDefinition
from ..definition.limits import MAX_JSON_DEPTH, max_dag_bytes, nests_deeper
from ..errors import NotFound
from . import output
from .formatting import _json_arg
from .loading import _dag_registry


def add_parser(command: Callable[[str, str], argparse.ArgumentParser], env: Config) -> None:
    """``dag`` and its subcommands, on the root parser's ``command`` factory."""
    d = command("dag", "save, list, show, start, test-run and stop DAG definitions (JSON files)")
    sub = d.add_subparsers(dest="dag_command", required=True, metavar="ACTION")

    def action(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=text, formatter_class=d.formatter_class)

    def registry(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--dag-registry",
            default=env.dag_registry,
            help="MODULE:ATTR naming the workers' dag.Registry: a sub_workflow node starting "
            "a workflow it does not allow is refused now (env SWF_DAG_REGISTRY)",
        )

    def run_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--input", default="{}", help="input as a JSON object")
        p.add_argument("--version", type=int, help="that saved version (default: the latest)")

    sv = action("save", "validate a definition (JSON file; -: stdin) and save its next version")
    sv.add_argument("file", help="the definition's JSON file, or - for stdin")
    sv.add_argument("--json", action="store_true", help="machine-readable output")
    registry(sv)

    ls = action("list", "saved definitions with their latest version")
    ls.add_argument("--json", action="store_true", help="machine-readable output")

    sh = action("show", "a saved definition: nodes and edges")
    sh.add_argument("name", help="the definition's name")
    sh.add_argument("--version", type=int, help="that version (default: the latest)")
    sh.add_argument("--json", action="store_true", help="machine-readable output")

    st = action("start", "start a saved definition; prints the instance id")
    st.add_argument("name", help="the definition's name")
    run_options(st)
    st.add_argument("--key", help="idempotency key: the same key returns the first run's id")
    st.add_argument("--priority", type=int, default=100, help="lower runs first")
    registry(st)

    tr = action(
        "test-run",
        "run a definition without saving it (a JSON file, else a saved name); prints the id",
    )
    tr.add_argument("definition", metavar="FILE|NAME", help="a JSON file (-: stdin) or a name")
    run_options(tr)
    registry(tr)

    sp = action("stop", "stop a test run: deletes its instance, log and tasks")
    sp.add_argument("id", help="the test run's instance id")


def run(store: Store, args: argparse.Namespace) -> None:
    registry = _dag_registry(getattr(args, "dag_registry", None))
    dags = DagClient(store, registry)
    action = args.dag_command
    if action == "save":
        save(dags, args)
    elif action == "list":
        listing(dags, args)
    elif action == "show":
        show(dags, args)
    elif action == "start":
        start(dags, args)
    elif action == "test-run":
        test_run(dags, args)
    elif action == "stop":
        stop(dags, args)


def read_definition(path: str) -> str:
    """The JSON text of ``path`` (``-``: stdin), refused by name when it cannot be read,
    is over ``SWF_MAX_DAG_BYTES`` (read no further than that) or nests too deep."""
    limit = max_dag_bytes()
    # One byte past the limit is enough to know it is over: a huge file or an endless
    # stdin is never read whole into memory.
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(limit + 1)
    except OSError as exc:
        raise ValueError(f"cannot read the DAG definition {path}: {exc.strerror or exc}") from exc
    if len(data) > limit:
        raise ValueError(
            f"{path} is over the DAG definition size limit of {limit} bytes "
            "(SWF_MAX_DAG_BYTES); nothing was written"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text: {exc}; nothing was written") from exc
    # Before json.loads sees it: see formatting._json_arg for why a deep text must not
    # reach Python's recursive decoder.
    if nests_deeper(text, MAX_JSON_DEPTH):
        raise ValueError(
            f"{path} nests deeper than {MAX_JSON_DEPTH} levels (the limit); nothing was written"
        )
    return text


def _input(args: argparse.Namespace) -> dict[str, Any]:
    data = _json_arg("--input", args.input)
    if not isinstance(data, Mapping):
        raise ValueError(f"--input must be a JSON object, got {type(data).__name__}")
    return dict(data)


def save(dags: DagClient, args: argparse.Namespace) -> None:
    text = read_definition(args.file)
    version = dags.save(text)
    name = json.loads(text)["name"]  # valid: save checked it
    if args.json:
        output.print_json({"name": name, "version": version})
    else:
        print(f"saved {name} version {version}")


def listing(dags: DagClient, args: argparse.Namespace) -> None:
    rows = sorted(dags.definitions())
    if args.json:
        output.print_json([{"name": n, "version": v} for n, v in rows])
    elif output.tty():
        output.print_table("Saved DAG definitions", ["name", "latest version"], rows)
    elif not rows:
        print("no DAG definition is saved", file=sys.stderr)
    else:
        for name, version in rows:
            print(f"{name}  {version}")


def show(dags: DagClient, args: argparse.Namespace) -> None:
    version, definition = dags.definition(args.name, args.version)
    if args.json:
        output.print_json({"name": args.name, "version": version, "definition": definition.dump()})
        return
    head = f"{definition.name}  version {version}  type {definition.type}"
    nodes = [
        (
            n.id,
            n.type,
            n.join,
            n.error_handling,
            json.dumps(n.config, sort_keys=True, separators=(",", ":")) if n.config else "",
        )
        for n in definition.nodes
    ]
    edges = [(e.source, e.target, e.source_handle or "") for e in definition.edges]
    if output.tty():
        con = output.console()
        con.print(Text(head, style="bold"))  # the name and type are data, not markup
        if definition.description:
            con.print(definition.description, markup=False)
        con.print(output.table("nodes", ["id", "type", "join", "on error", "config"], nodes))
        con.print(output.table("edges", ["from", "to", "handle"], edges))
        return
    print(head)
    if definition.description:
        print(f"  {definition.description}")
    print(f"nodes ({len(nodes)}):")
    for node_id, kind, join, on_error, config in nodes:
        print(f"  {node_id}  {kind}  join={join}  on_error={on_error}  {config}".rstrip())
    print(f"edges ({len(edges)}):")
    for source, target, handle in edges:
        print(f"  {source} -> {target}" + (f"  [{handle}]" if handle else ""))


def start(dags: DagClient, args: argparse.Namespace) -> None:
    data = _input(args)
    print(
        dags.start(
            args.name,
            data,
            version=args.version,
            idempotency_key=args.key,
            priority=args.priority,
        )
    )


def test_run(dags: DagClient, args: argparse.Namespace) -> None:
    data = _input(args)
    source = args.definition
    definition: DagDefinition | str
    # A file if there is one; what looks like a path but is missing is reported as a
    # missing file, not looked up as a saved name ("no saved DAG 'x/y.json'" misleads).
    if source == "-" or Path(source).is_file():
        definition = read_definition(source)
    elif os.sep in source or source.endswith(".json"):
        raise ValueError(f"no such file: {source}")
    else:
        try:
            _, definition = dags.definition(source, args.version)
        except NotFound as exc:
            raise NotFound(f"{source} is neither a file nor a saved DAG ({exc})") from None
    print(dags.test_run(definition, data))


def stop(dags: DagClient, args: argparse.Namespace) -> None:
    try:
        dags.stop_test_run(args.id)
    except NotFound as exc:
        if not str(exc).startswith("no test run"):
            raise  # not an id at all: its own message says why
        raise NotFound(
            f"{exc}: stop deletes test runs only; cancel a saved definition's run with "
            f"`statemachine-wf cancel {args.id}`"
        ) from None
    print(f"test run {args.id} stopped and deleted")
