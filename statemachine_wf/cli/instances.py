"""The commands on instances: ``start``, ``status``, ``history``, ``graph``, ``list``,
``cancel``/``resume``/``retry``, ``verify``, ``rebuild``, ``delete`` and ``purge``.

Each takes the parsed arguments and the :class:`~statemachine_wf.client.machine.Client` (and the
store where it reads one directly), prints its result, and raises a ``ValueError`` or a
:class:`~statemachine_wf.errors.WorkflowError` that ``main`` turns into exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime

from ..client.inbox import parse_duration
from ..client.machine import Client
from ..core.audit import lifecycle
from ..core.store import KIND_NAMES, Store, TypeKind
from ..definition.events import Status
from ..definition.wait_tokens import shown_event
from ..errors import UnknownWorkflowType
from . import output
from .formatting import _event_dict, _json_arg, _record_dict, _when


def start(client: Client, args: argparse.Namespace) -> None:
    data = _json_arg("--input", args.input)
    # Only types loaded with -m: the input is validated against the class's model before
    # anything is written, which the CLI cannot do for a type it has not imported.
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


def status(client: Client, store: Store, args: argparse.Namespace) -> None:
    r = client.get(args.id)
    kind: TypeKind = "dag" if r.kind == "dag" else "machine"
    # A finished instance needs no runner; a live one of a type no runner registered
    # waits silently, so say so rather than let it look stuck.
    hosted = r.status.terminal or r.type in store.registered_types(kind)
    if args.json:
        print(json.dumps({**_record_dict(r), "hosted": hosted}, indent=2))
        return
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


def history(client: Client, args: argparse.Namespace) -> None:
    # Wait tokens hidden, in every form (as ``signals`` hides them): see wait_tokens.
    events = [shown_event(e) for e in client.history(args.id)]
    if args.lifecycle and args.json:  # each event with its lifecycle name
        output.print_json([{"lifecycle": name, **_event_dict(e)} for name, e in lifecycle(events)])
    elif args.lifecycle:
        for name, e in lifecycle(events):
            who = f" by {e.worker}" if e.worker else ""
            print(f"{e.seq:>8} {_when(e.created_at)} {name} ({e.event_type}){who}")
    elif args.json:
        print(json.dumps([_event_dict(e) for e in events], indent=2))
    elif output.tty():
        output.print_table(
            f"history of {args.id}",
            ["seq", "at (UTC)", "event", "step", "attempt", "payload", "error", "worker"],
            [
                (
                    e.seq,
                    _when(e.created_at),
                    e.event_type,
                    e.node,
                    e.attempt,
                    output.clip(json.dumps(e.payload)) if e.payload else "",
                    f"{e.error['code']}: {e.error['message']}" if e.error else "",
                    e.worker,
                )
                for e in events
            ],
        )
    else:
        for e in events:
            where = f" {e.node}#{e.attempt}" if e.node else ""
            extra = json.dumps(e.payload) if e.payload else ""
            err = f" error={e.error['code']}: {e.error['message']}" if e.error else ""
            print(f"{e.seq:>8} {_when(e.created_at)} {e.event_type}{where} {extra}{err}")


def graph(client: Client, args: argparse.Namespace) -> None:
    cls = client.classes.get(args.type)
    if cls is None:
        raise UnknownWorkflowType(args.type, list(client.classes))
    spec = cls.spec()
    if args.json:  # the states and their declared targets, and the same as Mermaid
        steps = {name: sorted(s.targets) for name, s in spec.steps.items()}
        output.print_json(
            {
                "type": spec.workflow_type,
                "initial": spec.initial,
                "steps": steps,
                "mermaid": spec.mermaid(),
            }
        )
        return
    print(spec.mermaid(), end="")


def listing(client: Client, args: argparse.Namespace) -> None:
    """``list``: one page of rows on stdout; where more exist, a note on stderr."""
    if args.limit < 0 or args.offset < 0:
        raise ValueError("--limit and --offset must be >= 0")
    status = [Status(s) for s in args.status] if args.status else None
    # Offset paging, unlike the dashboard's keyset: simple for a script, but instances
    # started between two calls shift the pages (newest first), so a row can repeat.
    rows = client.list(
        status=status, type_prefix=args.type_prefix, limit=args.limit, offset=args.offset
    )
    if args.json:  # the page only: a script pages with --limit/--offset itself
        output.print_json([_record_dict(r) for r in rows])
        return
    if output.tty():
        output.print_table(
            None,
            ["id", "type", "status", "step", "attempt"],
            [(r.id, r.type, r.status, r.step, r.step_attempts) for r in rows],
        )
    else:
        for r in rows:
            print(f"{r.id}  {r.type:<32} {r.status:<10} {r.step}")
    shown = args.offset + len(rows)
    # A short first page is everything there is; only a full or a later page needs the
    # total, which costs a second query.
    if len(rows) == args.limit or args.offset:
        total = client.count(status=status, type_prefix=args.type_prefix)
        if not rows:
            print(f"showing none of {total} (--offset {args.offset})", file=sys.stderr)
        elif shown < total or args.offset:
            print(
                f"showing {args.offset + 1}-{shown} of {total}; see more with --limit/--offset",
                file=sys.stderr,
            )


def control(client: Client, cmd: str, args: argparse.Namespace) -> None:
    """``cancel``, ``resume`` or ``retry``: the client method of the same name."""
    # cmd is one of the three subcommand names main() dispatched on, never user text.
    r = getattr(client, cmd)(args.id)
    if args.json:
        output.print_json(_record_dict(r))
        return
    # A cancel lands at the running step's end; until then the status is unchanged.
    note = (
        " (cancel requested; stops at the running step's end)"
        if (cmd == "cancel" and not r.status.terminal)
        else ""
    )
    print(f"{r.id}  {r.status}{note}")


def verify(client: Client, args: argparse.Namespace) -> int:
    """Compare rows with the fold of their logs; the exit code is 1 if any differs."""
    # 1, not main()'s 2: a script must tell "rows differ" from "could not check".
    # Without ids: the newest --limit instances (list's order).
    ids = args.ids or [r.id for r in client.list(limit=args.limit)]
    differ: dict[str, dict[str, tuple[object, object]]] = {}
    with output.progress("verifying", total=len(ids), quiet=args.json) as advance:
        for instance_id in ids:
            diff = client.verify(instance_id)
            advance(1)
            if diff:
                differ[instance_id] = diff
                if not args.json:
                    print(f"{instance_id}: row differs from its log: {diff}")
    bad = len(differ)
    if args.json:
        output.print_json(
            {
                "verified": len(ids),
                "differ": {
                    i: {f: {"row": row, "log": log} for f, (row, log) in d.items()}
                    for i, d in differ.items()
                },
            }
        )
    else:
        print(f"verified {len(ids)} instance(s): {bad} differ")
    if not args.ids and len(ids) == args.limit and client.count() > args.limit:
        print(f"stopped at --limit {args.limit}; {client.count()} in all", file=sys.stderr)
    return 1 if bad else 0


def rebuild(client: Client, args: argparse.Namespace) -> None:
    """One line per id named; ``--all`` rebuilds every instance (a progress bar on a
    terminal) and prints a count."""
    if args.all == bool(args.ids):
        raise ValueError("rebuild needs instance ids or --all (not both)")
    if args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")
    ids = args.ids or [r.id for r in client.list(limit=args.limit)]
    done: list[dict[str, object]] = []
    with output.progress("rebuilding", total=len(ids), quiet=args.json) as advance:
        for instance_id in ids:
            projection = client.rebuild(instance_id)
            advance(1)
            done.append(
                {"id": instance_id, "status": str(projection.status), "step": projection.step}
            )
            if args.ids and not args.json:
                print(f"{instance_id} rebuilt: {projection.status} at {projection.step}")
    if args.json:
        output.print_json(done)
    elif args.all:
        print(f"rebuilt {len(ids)} instance(s)")
        if len(ids) == args.limit and client.count() > args.limit:
            print(f"stopped at --limit {args.limit}; {client.count()} in all", file=sys.stderr)


def delete(client: Client, args: argparse.Namespace) -> None:
    client.delete(args.id)
    if args.json:
        output.print_json({"id": args.id, "deleted": True})
        return
    print(f"{args.id} deleted (hidden until purged)")


def purge(client: Client, args: argparse.Namespace) -> None:
    age = parse_duration(args.older_than)
    # Refused before anything is deleted: a soft purge leaves instances recoverable, and
    # dead letters have no soft form, so the two together would half-honour --soft.
    if args.soft and args.dead_letters:
        raise ValueError("--soft applies to instances only; dead letters are deleted")
    # The total is not known before the end (a count would scan what the batches delete):
    # the bar counts up, batch by batch.
    verb = "marked deleted" if args.soft else "purged"
    with output.progress(f"{verb} instances", quiet=args.json) as advance:
        n = client.purge(older_than=age, batch_size=args.batch, soft=args.soft, on_batch=advance)
    letters = None
    if args.dead_letters:
        with output.progress("purged dead letters", quiet=args.json) as advance:
            letters = client.purge_dead_letters(
                older_than=age, batch_size=args.batch, on_batch=advance
            )
    if args.json:
        out: dict[str, object] = {"instances": n, "soft": args.soft}
        if letters is not None:
            out["dead_letters"] = letters
        output.print_json(out)
        return
    print(f"{verb} {n} finished instance(s)")
    if letters is not None:
        print(f"purged {letters} dead letter(s)")
