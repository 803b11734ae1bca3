"""A DAG left behind by a runner that died mid-node is resumed, not failed for its age.

The first node is claimed by a "runner" that then vanishes (its NODE_STARTED is in the
log, its lease runs out unrenewed). Later a real runner starts: it takes the task over and
finishes the instance; nothing in the log says FAILED.
"""

from __future__ import annotations

import time

from statemachine_wf import Runner, Status, Store
from statemachine_wf.dag import DagClient
from statemachine_wf.definition.events import Ev

from . import helpers as h


def test_an_abandoned_dag_is_resumed_by_the_next_runner(store: Store) -> None:
    client = DagClient(store)
    iid = client.start(h.linear(3), {"x": 1})
    dag_type = store.get(iid).type  # type: ignore[union-attr]
    claims = store.dag_claim(worker="gone:1:dead", types=[dag_type], lease=0.2)
    assert [c.instance.id for c in claims] == [iid]
    time.sleep(0.5)  # the dead runner's lease runs out; nobody renews it

    Runner(store, [], dags=h.registry).run_until_idle(timeout=60)

    record = client.get(iid)
    assert record.status == Status.COMPLETED
    assert client.output(iid) == {"result": 4}
    log = client.history(iid)
    assert not [e for e in log if e.event_type in (Ev.FAILED, Ev.NODE_FAILED)]
    started = [e.worker for e in log if e.event_type == Ev.NODE_STARTED and e.node == "s"]
    assert started[0] == "gone:1:dead"  # the dead runner started it
    assert len(started) == 2  # and the next one ran it again
