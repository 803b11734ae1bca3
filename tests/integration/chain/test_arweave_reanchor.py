"""The Arweave expired-anchor path on arlocal: the refused upload is re-prepared once.

arlocal refuses a transaction whose ``last_tx`` is not one of its last 50 blocks (nor the
owner's last transaction), as a gateway refuses an anchor that has expired. Here the
anchor expires between the record's save and its post: the gateway mines 60 blocks
first. arlocal's refusal is a bare ``400 Bad Request`` (the reason goes to its console
only), so the step cannot read "anchor" in it: it asks the anchor block's height
(``ArweaveClient.anchor_too_old``), and any other refusal stays FAILED
(``test_failure_table.py``: a tampered upload). The step must check the old id
(unknown: it can never be mined now), sign a new upload with a fresh anchor into
``arweave_reanchored_1`` (saved before its post), post it, and carry the new id on
chain; the wallet pays for the new upload only.
"""

from __future__ import annotations

import time

import pytest

from statemachine_wf import Status
from statemachine_wf.adapters.arweave import ArLocalNode, ArweaveClient, PreparedTx, UploadResult
from statemachine_wf.adapters.arweave.errors import InvalidTransaction
from statemachine_wf.adapters.arweave.steps import anchor_expired

from .conftest import Env
from .flows import QuickWork, work_input

pytestmark = pytest.mark.chain


class AnchorExpiresOnce(ArweaveClient):
    """The first post waits until its anchor has left the gateway's last 50 blocks."""

    node: ArLocalNode
    delayed: list[str]
    anchors: list[str]
    refused: list[InvalidTransaction]

    def post(self, prepared: PreparedTx) -> UploadResult:
        if not self.delayed:
            self.delayed.append(prepared.tx_id)
            self.anchors.append(str(prepared.header["last_tx"]))
            # arlocal orders blocks by their creation time (blocks mined by one request
            # share it): a pause first, and one block alone last, so that its anchor
            # (GET /tx_anchor) is the head again.
            time.sleep(1.1)
            self.node.mine(60)
            time.sleep(1.1)
            self.node.mine(1)
        try:
            return super().post(prepared)
        except InvalidTransaction as exc:
            self.refused.append(exc)
            raise


def test_expired_anchor_is_re_prepared_once_and_only_the_new_upload_is_paid(
    chain_env: Env,
) -> None:
    env = chain_env
    slow = AnchorExpiresOnce(env.arlocal.url, env.wallet, timeout=10.0)
    slow.node, slow.delayed, slow.anchors, slow.refused = env.arlocal, [], [], []
    balance = env.arweave.balance()
    run_id = env.client.start(QuickWork, work_input(0, env.signer.address, tag="anchor"))
    try:
        env.run(arweave=slow)
    finally:
        slow.close()

    record = env.client.get(run_id)
    assert record.status == Status.COMPLETED, record.error
    # The real gateway refused the old anchor without saying why (a bare 400), so the
    # step asked the anchor's age: its block is more than 50 deep, a fresh one is not.
    assert len(slow.refused) == 1
    assert not anchor_expired(slow.refused[0])
    assert env.arweave.anchor_too_old(slow.anchors[0])
    assert not env.arweave.anchor_too_old(env.arweave.anchor())
    old_id = record.progress["arweave_tx_id"]
    assert slow.delayed == [old_id]
    new = record.progress["arweave_reanchored_1"]
    assert new["tx_id"] != old_id
    assert record.progress.get("arweave_reanchored_2") is None  # re-prepared once
    assert env.arweave.status(old_id).kind == "not_found"  # never accepted: nothing paid
    assert env.arweave.status(new["tx_id"]).kind != "not_found"
    assert balance - env.arweave.balance() == new["reward"]
    # The chain carries the upload that exists.
    (event,) = env.work_events()
    assert event.args.evidenceId == f"ar://{new['tx_id']}"
    uploads = [
        e
        for e in env.client.history(run_id)
        if e.event_type == "STEP_COMPLETED" and e.node == "UPLOAD_EVIDENCE"
    ]
    assert len(uploads) == 1


class AcceptedThenRefused(ArweaveClient):
    """The gateway takes the first post, then the answer that reaches the step is an
    anchor refusal (a load-balanced gateway whose second backend saw the post late)."""

    posted: list[str]

    def post(self, prepared: PreparedTx) -> UploadResult:
        result = super().post(prepared)
        if not self.posted:
            self.posted.append(prepared.tx_id)
            raise InvalidTransaction("post tx: rejected: invalid anchor (last_tx)", status_code=400)
        return result


def test_a_refused_anchor_whose_upload_exists_is_not_signed_again(chain_env: Env) -> None:
    """The old id is checked before anything is signed anew: it exists, so nothing more
    is prepared or paid, and the chain carries the old id."""
    env = chain_env
    flaky = AcceptedThenRefused(env.arlocal.url, env.wallet, timeout=10.0)
    flaky.posted = []
    balance = env.arweave.balance()
    run_id = env.client.start(QuickWork, work_input(1, env.signer.address, tag="anchor"))
    try:
        env.run(arweave=flaky)
    finally:
        flaky.close()
    record = env.client.get(run_id)
    assert record.status == Status.COMPLETED, record.error
    old_id = record.progress["arweave_tx_id"]
    assert flaky.posted == [old_id]
    assert record.progress.get("arweave_reanchored_1") is None  # nothing signed anew
    assert balance - env.arweave.balance() == record.progress["arweave_reward"]  # paid once
    (event,) = env.work_events()
    assert event.args.evidenceId == f"ar://{old_id}"
