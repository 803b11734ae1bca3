"""The commands on an instance's inbox and what fell out of it: ``signal`` (send one),
``signals`` (counts per state, and rows) and ``dead-letters`` (list, show, redrive)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..client.machine import Client
from ..core.store import Store
from ..definition.wait_tokens import hide_token, token_label
from . import output
from .formatting import _json_arg, _when


def signal(client: Client, args: argparse.Namespace) -> None:
    payload = _json_arg("--payload", args.payload)
    print(client.signal(args.id, args.name, payload, token=args.token, delay=args.delay))


def _signals(client: Client, store: Store, args: argparse.Namespace) -> None:
    counts = client.signal_counts(args.id)
    rows = store.signals(instance_id=args.id, limit=args.limit) if args.list else []
    if args.json:
        out: dict[str, Any] = {"counts": counts}
        if args.list:
            out["signals"] = [
                # Only whether it has a token ("tokened"): a wait's token can be the secret
                # of an approval link (see the README), not something to print.
                hide_token(
                    {
                        "id": r.id,
                        "instance_id": r.instance_id,
                        "kind": r.kind,
                        "name": r.name,
                        "state": r.state,
                        "token": r.token,
                        "due_at": r.due_at,
                        "payload": r.payload,
                    }
                )
                for r in rows
            ]
        print(json.dumps(out, indent=2))
        return
    # Tables and lines show only whether a signal has a token, for the reason above.
    if output.tty():
        output.print_table("signals by state", list(counts), [list(counts.values())])
        if args.list:
            output.print_table(
                "signals, newest first",
                ["id", "due (UTC)", "instance", "kind", "name", "state", "token"],
                [
                    (
                        r.id,
                        _when(r.due_at),
                        r.instance_id,
                        r.kind,
                        r.name,
                        r.state,
                        token_label(r.token),
                    )
                    for r in rows
                ],
            )
        return
    print("  ".join(f"{k}={v}" for k, v in counts.items()))
    for r in rows:
        token = token_label(r.token)
        print(f"{r.id:>8} {_when(r.due_at)} {r.instance_id} {r.kind} {r.name!r} {r.state} {token}")


def _dead_letters(client: Client, args: argparse.Namespace) -> None:
    if args.action == "list":
        letters = client.dead_letters(limit=args.limit)
        if args.json:
            output.print_json(letters)
            return
        if output.tty():
            output.print_table(
                "dead letters, newest first",
                ["id", "at (UTC)", "instance", "reason", "redriven (UTC)"],
                [
                    (
                        d["id"],
                        _when(d["created_at"]),
                        d["instance_id"],
                        d["reason"],
                        _when(d["redriven_at"]) if d.get("redriven_at") else "",
                    )
                    for d in letters
                ],
            )
            return
        for d in letters:
            mark = f"  (redriven {_when(d['redriven_at'])})" if d.get("redriven_at") else ""
            print(f"{d['id']:>6} {_when(d['created_at'])} {d['instance_id']}  {d['reason']}{mark}")
        return
    if args.letter is None:
        raise ValueError(f"dead-letters {args.action} needs a dead letter id")
    if args.action == "show":
        print(json.dumps(client.dead_letter(args.letter), indent=2, default=str))
        return
    r = client.redrive(args.letter)
    if args.json:
        output.print_json(
            {"letter_id": r.letter_id, "action": r.action, "instance_id": r.instance_id}
        )
        return
    print(f"dead letter {r.letter_id}: {r.action}  instance {r.instance_id}")
