"""Progress a crash may leave out: compared without it, everything else still compared.

Found by ``TestSubmitCase`` under the random profile: a re-broadcast of recorded
transaction bytes is recorded (``resent_N``) once it went out, so a crash between the
broadcast and the record leaves the broadcast unrecorded. The crashed run then ended
COMPLETED with the contract called once, as the uncrashed run did, but without the
uncrashed run's ``resent_1``, and the helper called that a divergence. The queue's
progress model now declares its ``resent_N`` fields ``crash_dependent``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel

from statemachine_wf.adapters.ethereum.txqueue import RESEND_SLOTS, TxQueueProgress
from statemachine_wf.definition.events import Status
from statemachine_wf.errors import Retry
from statemachine_wf.testing import Proceed, Raise, Stepper
from statemachine_wf.testing.machine import crash_dependent, divergence, sqlite_store

from .replay import reference_run
from .test_chain_workflow import SIGNER, Submit, SubmitInput, world

STEP = "SUBMIT_ONCHAIN"


def test_the_queue_declares_its_re_broadcast_records_crash_dependent() -> None:
    assert crash_dependent(TxQueueProgress) == frozenset(RESEND_SLOTS)
    assert crash_dependent(Submit.spec().progress_model) == frozenset(RESEND_SLOTS)

    class Plain(BaseModel):
        n: int = 0

    assert crash_dependent(Plain) == frozenset()


def test_a_re_broadcast_a_crash_left_unrecorded_is_no_divergence(tmp_path: Path) -> None:
    plan = {(STEP, 2): Raise(Retry("injected transient error"))}
    deps = world()
    stepper = Stepper(
        Submit,
        sqlite_store(str(tmp_path / "crashed.db")),
        dependencies=deps,
        outcomes=lambda step, attempt: plan.get((step, attempt), Proceed()),
    )
    inp = SubmitInput(key="0x" + "01" * 32, signer_address=SIGNER)
    stepper.start(inp)
    first = stepper.tick(crash="after_save")  # tx_1 recorded, never broadcast
    assert (first.crashed, first.step) == ("after_save", STEP)
    while stepper.tick().attempt != 2:  # the start-up reconcile, then the injected retry
        pass
    cut = stepper.tick(crash="before_save")  # re-broadcasts tx_1, dies before resent_1
    assert (cut.crashed, cut.step) == ("before_save", STEP)
    crashed = stepper.run_to_end()
    stepper.close()

    ref_deps = world()
    clean, _ = reference_run(Submit, str(tmp_path / "reference.db"), stepper, inp, ref_deps)

    assert crashed.status == clean.status == "COMPLETED"
    assert len(deps["eth"].sent("submit")) == len(ref_deps["eth"].sent("submit")) == 1
    assert "resent_1" in clean.progress
    assert "resent_1" not in crashed.progress  # broadcast, then the crash: not recorded
    saved = set(crashed.progress)
    assert divergence(crashed, clean, saved=saved) is not None  # compared field by field
    exempt = crash_dependent(Submit.spec().progress_model)
    assert divergence(crashed, clean, saved=saved, exempt=exempt) is None
    # What is not exempt is still compared: another status, or a field of the effect.
    failed = replace(crashed, status=Status.FAILED)
    assert divergence(failed, clean, saved=saved, exempt=exempt) is not None
    moved = replace(crashed, progress={**crashed.progress, "onchain_block": 2})
    assert divergence(moved, clean, saved=saved, exempt=exempt) is not None
