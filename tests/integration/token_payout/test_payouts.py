"""TokenPayout on anvil: one transaction of the treasury in flight, ``event_check`` at
depth, and the treasury's slot given back by a stall revert with nothing in flight."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast
from unittest.mock import ANY

import pytest

from examples.contracts import payout_token_artifact
from examples.token_payout import PayoutInput, TokenPayout
from statemachine_wf import Client, Runner, RunnerOptions, Status
from statemachine_wf.adapters.ethereum import (
    AnvilNode,
    EthereumClient,
    LocalSigner,
    deploy,
    start_anvil,
)
from statemachine_wf.adapters.ethereum.steps import event_check
from statemachine_wf.adapters.ethereum.types import b32
from statemachine_wf.stores import open_store
from tests.integration.chain.conftest import close_http, rpc, wait_for
from tests.integration.chain.procs import Workers

from .conftest import SUPPLY, PayEnv, payout_input, settings_for

pytestmark = pytest.mark.chain

WORKER = Path(__file__).with_name("worker_main.py")


@pytest.fixture
def anvil_1s() -> Iterator[AnvilNode]:
    """anvil mining one block per second: transactions wait in the pool until then."""
    node = start_anvil(block_time=1)
    try:
        yield node
    finally:
        node.stop()


@pytest.mark.slow
def test_two_runner_processes_keep_one_treasury_transaction_in_flight(
    anvil_1s: AnvilNode, tmp_path: Path
) -> None:
    eth = EthereumClient.from_url(anvil_1s.url, timeout=5.0)
    treasury = LocalSigner.from_private_key(anvil_1s.private_keys[0])
    artifact = payout_token_artifact()
    token = deploy(eth, treasury, artifact.abi, artifact.bytecode, SUPPLY, timeout=60)
    url = f"sqlite:///{tmp_path / 'swf.db'}"
    store = open_store(url)
    store.migrate()
    client = Client(store, [TokenPayout])
    start = eth.nonce(treasury.address)
    ids = [client.start(TokenPayout, payout_input(n, tag="serial")) for n in range(8)]

    in_pool: list[int] = []
    holders: list[int] = []
    waiting: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        # The node's view (the treasury's pooled transactions: pending nonce - latest)
        # and the store's (the signers view: one slot holder, the rest waiting).
        while not stop.is_set():
            in_pool.append(eth.pending_count(treasury.address))
            queues = client.signers()
            holders.append(len(queues))
            waiting.append(sum(len(q.waiting) for q in queues))
            stop.wait(0.05)

    common = ["--url", url, "--rpc", anvil_1s.url, "--token", token, "--concurrency", "4"]
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with Workers(tmp_path, common, anvil_1s.private_keys[0], script=WORKER) as workers:
            runners = [workers.spawn("a"), workers.spawn("b")]
            wait_for(
                lambda: all(client.status(i) == Status.COMPLETED for i in ids),
                timeout=180,
                what="8 payouts completed",
            )
            for proc in runners:
                workers.stop(proc)
    finally:
        stop.set()
        sampler.join()
    assert len(in_pool) > 50
    assert max(in_pool) == 1  # one in flight at a time, and it was seen in flight
    assert max(holders) == 1  # one signer, one slot holder
    assert max(waiting) >= 1  # others were parked behind it
    env = PayEnv(
        node=anvil_1s,
        eth=eth,
        treasury=treasury,
        token=eth.contract(token, artifact.abi),
        store=store,
        client=client,
        settings=settings_for(token, treasury.address),
        db_url=url,
    )
    env.assert_paid_once(ids, start)
    assert client.signers() == []  # the slot is free at the end
    close_http(eth)  # before the store: its head watcher may be using it
    store.close()


def test_the_await_step_is_woken_by_new_blocks_not_by_its_poll(
    anvil_1s: AnvilNode, tmp_path: Path
) -> None:
    """With the head watcher on, a pending transaction's await step runs again when a
    block comes: here its own poll is an hour, and three payouts at depth 2 (mined, then
    one block deeper) still complete, each looking about once per block."""
    eth = EthereumClient.from_url(anvil_1s.url, timeout=5.0)
    treasury = LocalSigner.from_private_key(anvil_1s.private_keys[0])
    artifact = payout_token_artifact()
    token = deploy(eth, treasury, artifact.abi, artifact.bytecode, SUPPLY, timeout=60)
    env_store = open_store(f"sqlite:///{tmp_path / 'swf.db'}")
    env_store.migrate()
    client = Client(env_store, [TokenPayout])
    start = eth.nonce(treasury.address)
    ids = [client.start(TokenPayout, payout_input(n, tag="heads")) for n in range(3)]
    hour = settings_for(
        token, treasury.address, poll_interval=3600.0, confirmations=2, head_poll=0.1
    )
    runner = Runner(
        env_store,
        [TokenPayout],
        options=RunnerOptions(concurrency=4, idle_poll=0.2, lease=5.0),
        dependencies={
            "eth": eth,
            "signers": {treasury.address.lower(): treasury},
            "payouts": hour,
        },
    )
    runner.start()
    try:
        wait_for(
            lambda: all(client.status(i) == Status.COMPLETED for i in ids),
            timeout=90,
            what="3 payouts completed with an hour-long poll",
        )
    finally:
        runner.stop(timeout=10)
    for i in ids:
        looks = [
            e
            for e in client.history(i)
            if e.event_type == "STEP_STARTED" and e.node == "AWAIT_TX_CONFIRM"
        ]
        assert 1 <= len(looks) <= 6, len(looks)  # about one a block, not one a poll
    env = PayEnv(
        node=anvil_1s,
        eth=eth,
        treasury=treasury,
        token=eth.contract(token, artifact.abi),
        store=env_store,
        client=client,
        settings=hour,
        db_url="",
    )
    env.assert_paid_once(ids, start)
    close_http(eth)  # before the store: its head watcher may be using it
    env_store.close()


def test_paid_out_of_band_completes_from_the_event_at_depth_without_a_transaction(
    pay_env: PayEnv,
) -> None:
    """``event_check``: a payout already paid (by hand) is found by its ``Paid`` event,
    but only once that event is as deep as the confirmations ask (here 2)."""
    env = pay_env
    inp = payout_input(0, tag="oob")
    rpc(env.eth, "evm_setAutomine", False)
    try:
        by_hand = env.eth.build_call(
            env.token, "payout", b32(inp["payout_id"]), inp["recipient"], inp["amount"],
            sender=env.treasury.address,
        )  # fmt: skip
        env.eth.send_raw(env.treasury.sign_transaction(by_hand))
        rpc(env.eth, "evm_mine")  # the Paid event is in the head block: 1 deep, not 2
        nonce = env.eth.nonce(env.treasury.address)
        run_id = env.client.start(TokenPayout, inp)
        deep = settings_for(env.token.address, env.treasury.address, confirmations=2)
        with_runner = env.runner(payouts=deep)
        with_runner.start()
        try:
            # Not deep enough: the step does not complete, and sends nothing that mines
            # (the call would revert "already paid": the revert row snoozes for depth).
            wait_for(
                lambda: any(e.event_type == "STEP_WAITING" for e in env.client.history(run_id)),
                timeout=60,
                what="the step waiting for depth",
            )
            assert env.client.status(run_id) != Status.COMPLETED
            rpc(env.eth, "evm_mine")  # now 2 deep
            wait_for(
                lambda: env.client.status(run_id) == Status.COMPLETED,
                timeout=60,
                what="completion from the event",
            )
        finally:
            with_runner.stop(timeout=10)
    finally:
        rpc(env.eth, "evm_setAutomine", True)
    record = env.client.get(run_id)
    assert record.progress["already_on_chain"] is True
    assert record.progress.get("tx_1") is None  # nothing signed
    assert env.eth.nonce(env.treasury.address, "pending") == nonce  # nothing sent
    assert env.balance(inp["recipient"]) == inp["amount"]  # paid once, by hand
    assert len(env.paid_events()) == 1


def test_paid_out_of_band_deep_enough_completes_at_once_with_the_event_as_evidence(
    pay_env: PayEnv,
) -> None:
    env = pay_env
    inp = payout_input(0, tag="deep")
    by_hand = env.eth.build_call(
        env.token, "payout", b32(inp["payout_id"]), inp["recipient"], inp["amount"],
        sender=env.treasury.address,
    )  # fmt: skip
    sent = env.eth.send_raw(env.treasury.sign_transaction(by_hand))  # automine: 1 deep
    # anvil mines it just after the call returns, not during it: wait for that block.
    env.eth.w3.eth.wait_for_transaction_receipt(cast(Any, sent), timeout=30)
    nonce = env.eth.nonce(env.treasury.address)
    run_id = env.client.start(TokenPayout, inp)
    env.runner().run_until_idle(timeout=60, settle=0.3)
    record = env.client.get(run_id)
    assert record.status == Status.COMPLETED
    assert record.progress["already_on_chain"] is True
    assert env.eth.nonce(env.treasury.address, "pending") == nonce
    completed = [e for e in env.client.history(run_id) if e.event_type == "STEP_COMPLETED"]
    assert [(e.node, e.payload["to"]) for e in completed] == [("SUBMIT_ONCHAIN", "COMPLETED")]
    # The reconcile hook's evidence comes from the same check: the Paid log's fields.
    found = TokenPayout.done_when(env.eth, env.token, PayoutInput.model_validate(inp), 1)
    assert found == {"paid_to": inp["recipient"], "paid_amount": inp["amount"]}


def test_event_check_searches_from_the_block_it_is_given(pay_env: PayEnv) -> None:
    """``event_check(from_block=...)``: the search starts there (a hosted node refuses
    ``eth_getLogs`` over the whole chain), as a number or from the input."""
    env = pay_env
    inp = payout_input(0, tag="from")
    by_hand = env.eth.build_call(
        env.token, "payout", b32(inp["payout_id"]), inp["recipient"], inp["amount"],
        sender=env.treasury.address,
    )  # fmt: skip
    sent = env.eth.send_raw(env.treasury.sign_transaction(by_hand))  # automine: own block
    env.eth.w3.eth.wait_for_transaction_receipt(cast(Any, sent), timeout=30)
    [paid] = env.paid_events()
    block = int(paid["blockNumber"])
    rpc(env.eth, "evm_mine")  # and one more on top
    model = PayoutInput.model_validate(inp)

    def check(from_block: Any) -> Any:
        done = event_check("Paid", lambda i: {"payoutId": b32(i.payout_id)}, from_block=from_block)
        return done(env.eth, env.token, model, 1)

    assert check(block) == {"paid": True, "event_block": block, "event_tx": ANY}
    assert check(lambda i: block) == check(block)
    assert check(block + 1) is None  # after the event: not found
    assert check(0) == check(block)  # the default: the whole chain


def test_stall_revert_with_nothing_in_flight_frees_the_slot_for_the_next_waiter(
    pay_env: PayEnv,
) -> None:
    """A holds the treasury's slot with a transaction in the pool, B waits for the slot.
    A's transaction is dropped and its nonce used by a transfer that drains the treasury
    below A's amount: A, sent round SUBMIT_ONCHAIN, reverts "treasury empty" with nothing
    in flight -> STALLED, and the slot is released at once: B takes it and is paid while
    A is still STALLED (its retry is minutes away)."""
    env = pay_env
    a_inp = payout_input(0, tag="stall", amount=SUPPLY * 6 // 10)
    b_inp = payout_input(1, tag="stall", amount=SUPPLY // 10)
    slow = settings_for(
        env.token.address, env.treasury.address, stall_retry=600.0, not_found_after=600.0
    )
    rpc(env.eth, "evm_setAutomine", False)
    try:
        a = env.client.start(TokenPayout, a_inp)
        runner = env.runner(payouts=slow)
        runner.start()
        try:
            wait_for(lambda: env.client.get(a).progress.get("tx_1"), timeout=60, what="A sent")
            wait_for(
                lambda: env.eth.pending_count(env.treasury.address) == 1,
                timeout=30,
                what="A's transaction in the pool",
            )
            b = env.client.start(TokenPayout, b_inp)
            wait_for(
                lambda: [q.waiting for q in env.client.signers()] == [(b,)],
                timeout=60,
                what="B parked behind A's slot",
            )
            assert [q.holder for q in env.client.signers()] == [a]
            a_tx = env.client.get(a).progress["tx_1"]
            rpc(env.eth, "anvil_dropTransaction", a_tx["tx_hash"])
            rpc(env.eth, "evm_setAutomine", True)
            drain = env.eth.build_call(
                env.token, "transfer", "0x000000000000000000000000000000000000dEaD", SUPPLY // 2,
                sender=env.treasury.address, nonce=a_tx["nonce"],
            )  # fmt: skip
            env.eth.send_raw(env.treasury.sign_transaction(drain))  # A's nonce, mined
            wait_for(lambda: env.client.status(a) == Status.STALLED, timeout=60, what="A stalled")
            wait_for(lambda: env.client.status(b) == Status.COMPLETED, timeout=60, what="B paid")
            assert env.client.status(a) == Status.STALLED  # still: B did not wait for it
        finally:
            runner.stop(timeout=10)
    finally:
        rpc(env.eth, "evm_setAutomine", True)
    record = env.client.get(a)
    assert record.error is not None
    assert record.error["code"] == "treasury_empty"
    assert env.client.signers() == []  # nobody holds the treasury's slot
    assert env.balance(a_inp["recipient"]) == 0
    assert env.balance(b_inp["recipient"]) == b_inp["amount"]
    assert [e.args.payoutId for e in env.paid_events()] == [b32(b_inp["payout_id"])]
    waits = [e for e in env.client.history(b) if e.event_type == "STEP_WAITING"]
    assert any(e.payload.get("lock") for e in waits)  # B really waited for the slot
