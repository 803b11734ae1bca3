"""The reference replay (an uncrashed run of the same outcomes) meets the same world.

Found by ``TestTransfer`` under the random profile: a crash lost the outcome of
``confirm`` attempt 2 after its action had polled the chain, and the fake chain mines
on the second poll. The reference run, which never ran that lost attempt, polled once
less, saw "pending" where the crashed run saw "mined", and ended COMPLETED where the
crashed run (rightly) ended FAILED. The runtime was right; the checker's replay was
not. Lost attempts are now replayed as ghosts: run for their effect on the world, up
to where the crash struck, their result dropped.
"""

from __future__ import annotations

from pathlib import Path

from statemachine_wf.definition.events import Ev, Status
from statemachine_wf.errors import Fail, Retry
from statemachine_wf.testing import (
    Ghost,
    Outcome,
    Proceed,
    Raise,
    Stepper,
    committed_outcomes,
    sqlite_store,
)

from .replay import reference_run
from .workflows import Order, OrderInput, Transfer, TransferInput, order_world, transfer_world

PLAN: dict[tuple[str, int], Outcome] = {
    ("confirm", 3): Raise(Retry("injected transient error")),
    ("confirm", 4): Raise(Fail("injected failure"), after=True),
}


def _completed(stepper: Stepper, step: str, attempt: int) -> bool:
    return any(
        e.event_type == Ev.STEP_COMPLETED and (e.node, e.attempt) == (step, attempt)
        for e in stepper.store.events(stepper.instance_id or "")
    )


def test_a_lost_attempt_is_replayed_for_its_effect_on_the_world(tmp_path: Path) -> None:
    stepper = Stepper(
        Transfer,
        sqlite_store(str(tmp_path / "crashed.db")),
        dependencies=transfer_world(),
        outcomes=lambda step, attempt: PLAN.get((step, attempt), Proceed()),
    )
    stepper.start(TransferInput(sender="a", amount=1, drops=1))
    while not _completed(stepper, "broadcast", 2):  # confirm 1 saw the drop: broadcast again
        stepper.tick()
    lost = stepper.tick(crash="before_outcome")  # confirm 2 polls the chain; outcome lost
    assert (lost.crashed, lost.step, lost.attempt) == ("before_outcome", "confirm", 2)
    crashed = stepper.run_to_end()
    stepper.close()
    assert crashed.status == Status.FAILED  # attempt 4 saw it mined, then failed after
    queues = committed_outcomes(stepper)
    assert [type(o) for o in queues["confirm"]] == [Proceed, Ghost, Raise, Raise]

    clean, _ = reference_run(
        Transfer,
        str(tmp_path / "reference.db"),
        stepper,
        TransferInput(sender="a", amount=1, drops=1),
        transfer_world(),
    )
    assert (clean.status, clean.progress) == (crashed.status, crashed.progress)


def test_a_ghost_stops_where_the_crash_struck(tmp_path: Path) -> None:
    """A crash before the charge's ``ctx.save``: the ghost opens the intent, then stops."""
    world = order_world()
    stepper = Stepper(Order, sqlite_store(str(tmp_path / "crashed.db")), dependencies=world)
    stepper.start(OrderInput(order_id="o1", amount=5))
    while True:
        result = stepper.tick(crash="before_save")
        if result.crashed:
            break
    ghost = stepper.lost[(result.step or "", result.attempt or 0)]
    assert (ghost.stop, ghost.saves) == ("before_save", 0)
    crashed = stepper.run_to_end()
    stepper.close()

    ref_world = order_world()
    clean, reference = reference_run(
        Order,
        str(tmp_path / "reference.db"),
        stepper,
        OrderInput(order_id="o1", amount=5),
        ref_world,
    )
    assert clean.status == crashed.status == Status.COMPLETED
    assert ref_world["bank"].captured == world["bank"].captured == {"ch_o1_5": 5}
    saves = [
        e
        for e in reference.store.events(reference.instance_id or "")
        if e.event_type == Ev.PROGRESS_SET
    ]
    assert len(saves) == 1, "the ghost stopped before its save, as the crash did"
