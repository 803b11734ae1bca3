"""A chain workflow property-tested on the library's in-memory chain (issue 11, item 7).

The ``Submit`` workflow is the README's "your own contract" shape; the test itself is
the ten lines under "the property test". Crashes at every write boundary, restarts and
injected step failures are drawn by the shipped helper; the final check: the contract
was called at most once, and a COMPLETED instance's effect is on chain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine_wf import InstanceRecord
from statemachine_wf.adapters.ethereum.fake import FakeChain, FakeRevert
from statemachine_wf.adapters.ethereum.steps import ContractCall, TxProgress, view_check
from statemachine_wf.adapters.ethereum.types import Address, Bytes32, b32
from statemachine_wf.stores.sqlite import SQLiteStore
from statemachine_wf.testing import Stepper, WorkflowStateMachine, always, check_workflow

REGISTRY = "0x000000000000000000000000000000000000BEEF"


class Registry:
    """The contract, in Python: ``submit`` once per key."""

    def __init__(self) -> None:
        self.done: set[bytes] = set()

    def submit(self, sender: str, key: bytes) -> None:
        if key in self.done:
            raise FakeRevert("already submitted")
        self.done.add(key)

    def isDone(self, key: bytes) -> bool:
        return key in self.done


class SubmitInput(BaseModel):
    key: Bytes32
    signer_address: Address


class Submit(ContractCall[SubmitInput, TxProgress]):
    workflow_type = "registry.submit.v1"
    abi = ()
    function = "submit"
    done_when = view_check("isDone", lambda inp: (b32(inp.key),))

    def contract_address(self, inp: SubmitInput) -> str:
        return REGISTRY

    def arguments(self, inp: SubmitInput, progress: TxProgress) -> tuple[Any, ...]:
        return (b32(inp.key),)


SIGNER = FakeChain(Registry()).new_signer().address  # the same throwaway key every chain


# --- the property test -----------------------------------------------------------------
def world() -> dict[str, Any]:
    chain = FakeChain(Registry())
    return {"eth": chain, "signers": {SIGNER.lower(): chain.new_signer()}}


def once(deps: Any, record: InstanceRecord) -> None:
    assert len(deps["eth"].sent("submit")) <= 1
    assert (record.status != "COMPLETED") or deps["eth"].call_view(None, "isDone", b"\1" * 32)


inputs = st.builds(SubmitInput, key=st.just("0x" + "01" * 32), signer_address=st.just(SIGNER))
TestSubmit = WorkflowStateMachine.for_workflow(
    Submit, inputs=inputs, dependencies=world, check=once, reconcile_outcome=always()
)
# ----------------------------------------------------------------------------------------

TestSubmitCase = TestSubmit.TestCase


def test_fake_chain_fates() -> None:
    """The fake's own fates: pending, dropped, reorged back to the pool, reverted."""
    chain = FakeChain(Registry(), automine=False, blocks_per_look=0)
    signer = chain.new_signer()
    contract = chain.contract(REGISTRY, ())
    tx = chain.build_call(contract, "submit", b"\1" * 32, sender=signer.address, nonce=0)
    signed = signer.sign_transaction(tx)
    assert chain.send_raw(signed) == signed.tx_hash
    assert chain.receipt_status(signed.tx_hash).kind == "pending"
    assert chain.nonce(signer.address, "pending") == 1
    assert chain.nonce(signer.address) == 0
    assert chain.drop(signed.tx_hash)
    assert chain.receipt_status(signed.tx_hash).kind == "not_found"
    chain.send_raw(signed)
    chain.mine()
    assert chain.receipt_status(signed.tx_hash, confirmations=2).kind == "pending"
    chain.mine()
    assert chain.receipt_status(signed.tx_hash, confirmations=2).kind == "confirmed"
    assert chain.call_view(contract, "isDone", b"\1" * 32, block=0) is False
    assert chain.call_view(contract, "isDone", b"\1" * 32) is True
    chain.reorg(2)
    assert chain.receipt_status(signed.tx_hash).kind == "pending"
    chain.mine()
    again = signer.sign_transaction({**tx, "nonce": 1})
    chain.send_raw(again)
    chain.mine()
    status = chain.receipt_status(again.tx_hash)
    assert (status.kind, status.revert_reason) == ("reverted", "already submitted")


def test_check_workflow_on_the_fake_chain() -> None:
    check_workflow(
        Submit,
        inputs=inputs,
        dependencies=world,
        check=once,
        reconcile_outcome=always(),
        max_examples=10,
    )


def test_rebroadcasts_cut_short_by_crashes_do_not_stall_the_step(tmp_path: Path) -> None:
    """The case hypothesis found, fixed: SUBMIT_ONCHAIN crashes right after its first
    write, attempt after attempt (after recording tx_1, then after recording each
    re-broadcast, before sending it). Counted before they went out, the re-broadcasts
    reached max_rebroadcasts (3) at the fourth crash and the step STALLED with tx_dropped,
    where an uncrashed run completed. Counted once sent, the second crash comes after the
    re-broadcast went out, and the step completes, submitted once."""
    store = SQLiteStore(str(tmp_path / "swf.db"))
    store.migrate()
    deps = world()
    stepper = Stepper(Submit, store, dependencies=deps)
    stepper.start(SubmitInput(key="0x" + "01" * 32, signer_address=SIGNER))
    try:
        # A crash at every write the workflow makes, each followed by a clean tick (the
        # reconcile): before the fix, four of them STALLED the step.
        for _ in range(12):
            if not stepper.active:
                break
            result = stepper.tick(crash="after_save")
            if result.crashed is not None:
                assert result.step == "SUBMIT_ONCHAIN"
                stepper.tick()
        assert stepper.crashes >= 2  # tx_1 recorded, then a re-broadcast recorded
        final = stepper.run_to_end()
    finally:
        stepper.close()
        store.close()
    assert final.status == "COMPLETED", final.error
    assert len(deps["eth"].sent("submit")) == 1
