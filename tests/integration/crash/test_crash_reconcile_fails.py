"""A reconcile hook that fails once never lets an in-doubt step run again unasked.

A runner process pays and is SIGKILLed before the step's completion is recorded. The
next runner finds the step in doubt and asks the hook, which fails once (an exception,
or ``Stall``). The step stays in doubt: the next attempt asks the hook again, which
finds the payment and completes the instance. One payment, two hook calls.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from statemachine_wf.client.machine import Client
from statemachine_wf.definition.events import Ev, Status

from .harness import Children, Target, poll_until
from .hook_worker import Paying, PayInput

HOOK_WORKER = Path(__file__).with_name("hook_worker.py")


@pytest.mark.parametrize("fail_with", ["error", "stall"])
def test_failing_hook_keeps_the_step_in_doubt(target: Target, fail_with: str) -> None:
    store = target.open_store()
    ledger = target.open_ledger()
    try:
        client = Client(store, [Paying])
        instance_id = client.start(Paying, PayInput(fail_with=fail_with))
        with Children(target, script=HOOK_WORKER) as children:
            doomed = children.spawn("doomed", lease=1.0, chaos="after_effect:1")
            children.wait_exit(doomed, 30, "the runner killed after the payment")
            assert ledger.runs()[(instance_id, "pay")] == 1
            survivor = children.spawn("survivor", lease=1.0)
            poll_until(
                lambda: client.status(instance_id) == Status.COMPLETED,
                timeout=60,
                what=f"the instance to complete\n{children.log_tail(survivor)}",
            )
            children.terminate(survivor)
        runs = ledger.runs()
        assert runs[(instance_id, "pay")] == 1, "the payment was made twice"
        assert runs[(instance_id, "hook")] == 2  # failed once, then asked again
        events = store.events(instance_id)
        kinds = [(e.event_type, e.node, e.attempt) for e in events]
        started = [k for k in kinds if k[0] == Ev.STEP_STARTED]
        assert started == [(Ev.STEP_STARTED, "pay", 1)], kinds
        failed = [e for e in events if e.event_type == Ev.STEP_FAILED]
        assert len(failed) == 1
        assert failed[0].payload["in_doubt"] is True
        reconciled = [e for e in events if e.event_type == Ev.RECONCILED]
        assert [e.payload["decision"] for e in reconciled] == ["complete"]
        assert reconciled[0].payload["in_doubt"] is True
        assert client.verify(instance_id) == {}
    finally:
        ledger.close()
        store.close()
