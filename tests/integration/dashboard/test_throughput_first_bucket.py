"""The dashboard's throughput chart counts what the store puts in the bucket that begins
before ``since`` (its buckets start at multiples of ``bucket``), as ``top`` does: both
show every instance started and finished in the window, from real rows on both stores."""

from __future__ import annotations

import re
import time

from statemachine_wf import Client, Runner, RunnerOptions, Store
from statemachine_wf.cli.top import frame
from statemachine_wf.dashboard import graphs
from statemachine_wf.dashboard.reads import overview
from tests.unit.core.workflows import ThreeSteps

# Longer than the epoch is old: every row falls in the store's bucket starting at 0,
# which begins before `since` whatever the clock says (index -1 in the chart's columns).
BUCKET = 1e10


def test_the_first_bucket_is_counted_by_the_chart_and_by_top(store: Store) -> None:
    since = time.time() - 1
    client = Client(store, [ThreeSteps])
    for n in range(3):
        client.start(ThreeSteps, {"n": n})
    Runner(store, [ThreeSteps], options=RunnerOptions(concurrency=2)).run_until_idle(timeout=60)
    client.start(ThreeSteps, {"n": 9})  # started, not finished
    now = time.time()
    reads = overview(store)
    assert reads is not None
    rows = reads.throughput(since=since, bucket=BUCKET)
    assert {at for at, _, _ in rows} == {0.0}  # the store's bucket: before `since`

    chart = graphs.throughput_chart(rows, since=since, now=now, bucket=BUCKET)
    assert re.search(r">started: 4<", chart)
    assert re.search(r">finished: 3<", chart)
    shown = frame(reads, now=now, window=now - since, bucket=BUCKET)["throughput"]
    assert (sum(shown["started"]), sum(shown["finished"])) == (4, 3)
