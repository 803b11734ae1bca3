"""The signers view (``Client.signers``, ``statemachine-wf signers``) on both stores.

The workflow below does what the Ethereum queue does to the store - holds the slot
``eth:<chain>:<signer>``, saves ``tx_N`` before a broadcast and ``resent_N`` before a
re-broadcast - without a chain, so the view is checked against known values.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from pydantic import BaseModel

from statemachine_wf import (
    COMPLETED,
    Client,
    Runner,
    RunnerOptions,
    Snooze,
    Status,
    StepContext,
    Store,
    Workflow,
    signer_queues,
    step,
)
from statemachine_wf.cli import main

A = "eth:31337:0x00000000000000000000000000000000000000aa"
B = "eth:5:0x00000000000000000000000000000000000000bb"


class In(BaseModel):
    key: str
    sends: int = 0  # how many transactions to record (a fee bump makes the second)
    resend: bool = False


class Pr(BaseModel):
    tx_1: dict[str, Any] | None = None
    tx_2: dict[str, Any] | None = None
    resent_1: dict[str, Any] | None = None


def record(n: int, at: float) -> dict[str, Any]:
    return {"tx_hash": f"0x{n:064x}", "nonce": 6, "signed_at": at, "raw_hex": "0x02"}


class Sender(Workflow[In, Pr]):
    workflow_type = "t.signers.v1"

    @step(initial=True, to=COMPLETED)
    def send(self, ctx: StepContext[In, Pr]) -> str:
        ctx.hold(ctx.input.key, recheck=3600)
        for n in range(1, ctx.input.sends + 1):
            ctx.save(**{f"tx_{n}": record(n, 1000.0 + n)})
        if ctx.input.resend:
            ctx.save(resent_1={"tx_hash": f"0x{ctx.input.sends:064x}", "at": 1010.0})
        raise Snooze(3600, "in the pool")


def started(store: Store) -> tuple[Client, dict[str, str]]:
    client = Client(store, [Sender])
    ids = {
        "holder": client.start(Sender, In(key=A, sends=2, resend=True)),
        "first": client.start(Sender, In(key=A)),
        "second": client.start(Sender, In(key=A)),
        "other": client.start(Sender, In(key=B)),  # holds B, has sent nothing
        "gone": client.start(Sender, In(key=A)),
    }
    # One at a time, in creation order: the first holds A, the next ones queue behind it.
    Runner(store, [Sender], options=RunnerOptions(concurrency=1)).run_until_idle(timeout=30)
    client.cancel(ids["gone"])  # an ended waiter is not listed
    return client, ids


def test_each_busy_signer_with_holder_waiters_nonce_and_pending_hash(store: Store) -> None:
    client, ids = started(store)
    before = time.time()
    queues = client.signers()
    assert [q.key for q in queues] == [A, B]  # by key
    a, b = queues
    assert (a.chain_id, a.signer) == (31337, A.split(":")[2])
    assert (a.holder, a.holder_status, a.holder_step) == (ids["holder"], "RUNNING", "send")
    assert a.holder_type == "t.signers.v1"
    assert a.waiting == (ids["first"], ids["second"])  # oldest wait first
    assert [s.tx_hash for s in a.sent] == [f"0x{1:064x}", f"0x{2:064x}"]
    assert a.last_nonce == 6
    assert a.pending_hash == f"0x{2:064x}"  # the latest (the fee bump)
    assert a.sent[-1].signed_at == 1002.0
    assert a.sent[-1].sent_at == 1010.0  # re-broadcast later than it was signed
    assert a.pending_age is not None
    assert a.pending_age >= before - 1010.0
    assert a.held_since <= before
    assert (b.chain_id, b.holder, b.waiting, b.sent) == (5, ids["other"], (), ())
    assert (b.last_nonce, b.pending_hash, b.pending_age) == (None, None, None)

    assert [q.key for q in signer_queues(store, chain_id=5)] == [B]
    assert signer_queues(store, chain_id=1) == []
    assert signer_queues(store, now=1015.0)[0].pending_age == 5.0

    client.cancel(ids["holder"])  # the holder ends: its slot is free, the waiters woken
    assert client.status(ids["holder"]) == Status.CANCELLED
    assert [q.key for q in client.signers()] == [B]


def test_the_cli_prints_the_same(
    store: Store, store_url: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    _, ids = started(store)
    url, options = store_url
    argv = ["--db", url, *(["--schema", options["schema"]] if options else [])]
    capsys.readouterr()

    assert main([*argv, "signers", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["key"] for r in rows] == [A, B]
    assert rows[0]["holder"] == ids["holder"]
    assert rows[0]["waiting"] == [ids["first"], ids["second"]]
    assert (rows[0]["last_nonce"], rows[0]["pending_hash"]) == (6, f"0x{2:064x}")
    assert rows[0]["pending_age"] > 0
    assert rows[1]["pending_hash"] is None

    assert main([*argv, "signers", "--chain-id", "31337"]) == 0
    text = capsys.readouterr().out
    assert f"signer {A.split(':')[2]}  chain 31337" in text
    assert f"holder   {ids['holder']}  t.signers.v1  RUNNING at send" in text
    assert f"pending  0x{2:064x}  nonce 6" in text
    assert "(2 signed)" in text
    assert f"waiting  2\n    {ids['first']}\n    {ids['second']}" in text
    assert B not in text

    assert main([*argv, "signers", "--chain-id", "1"]) == 0
    assert "every signer is idle" in capsys.readouterr().out
