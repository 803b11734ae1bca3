"""``statemachine-wf signers``: each busy signer's transaction queue, from the store."""

from __future__ import annotations

import argparse
import json

from ..client.machine import Client
from . import output
from .formatting import _when


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s"


def signers(client: Client, args: argparse.Namespace) -> None:
    queues = client.signers(chain_id=args.chain_id)
    if args.json:
        print(json.dumps([q.as_dict() for q in queues], indent=2))
        return
    if not queues:
        print("no signer slot is held (every signer is idle)")
        return
    if output.tty():  # a card per signer: addresses and hashes are too wide for one row
        con = output.console()
        for q in queues:
            rows = [
                ("holder", f"{q.holder}  {q.holder_type or '?'}  {q.holder_status or 'gone'}"),
                ("at step", q.holder_step or "-"),
                ("since", f"{_when(q.held_since)} UTC"),
                ("pending", q.pending_hash or "nothing signed yet"),
                ("nonce", q.last_nonce),
                ("age", _age(q.pending_age)),
                ("signed", len(q.sent)),
                ("waiting", "\n".join([str(len(q.waiting)), *q.waiting])),
            ]
            title = f"signer {q.signer}  chain {q.chain_id}"
            con.print(output.table(title, ["", ""], rows, show_header=False))
        return
    for q in queues:
        print(f"signer {q.signer}  chain {q.chain_id}")
        print(
            f"  holder   {q.holder}  {q.holder_type or '?'}  {q.holder_status or 'gone'}"
            f" at {q.holder_step or '-'}  since {_when(q.held_since)} UTC"
        )
        if q.pending_hash is None:
            print("  pending  nothing signed yet")
        else:
            print(
                f"  pending  {q.pending_hash}  nonce {q.last_nonce}"
                f"  age {_age(q.pending_age)}  ({len(q.sent)} signed)"
            )
        print(f"  waiting  {len(q.waiting)}" + "".join(f"\n    {w}" for w in q.waiting))
