"""Handing claims back: what a runner releases instead of running.

A released task is due at once for whoever runs next. Its STEP_STARTED (or NODE_STARTED)
is already in the log, so the next try is counted. A claim no worker ran (:func:`unrun`)
says so: a step it started gets a STEP_RELEASED and is not in doubt. One abandoned
mid-step (:func:`abandoned`) is in doubt, as after a crash. Each release is fenced by the
claim's lease token and the runner's incarnation: a newer claim of the instance (ours
after a lapse, or anybody's) is never handed back.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading

from ..core.store import Claim, Store
from ..errors import StoreError, StoreUnavailable

log = logging.getLogger("statemachine_wf.runner")


def unrun(store: Store, worker: str, incarnation: str, claim: Claim) -> None:
    """Release ``claim``, handed to a runner as it stops (a start leased to it, a claim
    taken for its workers); if the release fails, the lease runs out instead."""
    with contextlib.suppress(StoreError):
        store.release(
            worker=worker,
            instance_ids=[claim.instance.id],
            token=claim.task.lease_token,
            incarnation=incarnation,
            unrun=claim.started,
        )


def abandoned(
    store: Store,
    worker: str,
    incarnation: str,
    claim: tuple[str, str | None],
    stopping: threading.Event,
) -> None:
    """Release a claim (instance id, lease token) abandoned for a store error, once the
    store answers again.

    The runner's heartbeats extend every lease it holds, so an abandoned claim would
    otherwise never lapse. Until the release succeeds the calling thread does nothing
    else (there is nothing else it could do while the database is away); on shutdown
    (``stopping``) the lease simply runs out.

    After the release the thread backs off before it claims again (0.5 to 1.5 s,
    random): the instance it handed back is due at once, and a store that fails every
    commit would otherwise have its step run again in a tight loop.
    """
    instance_id, token = claim
    delay = 0.1
    while not stopping.is_set():
        try:
            store.release(
                worker=worker, instance_ids=[instance_id], token=token, incarnation=incarnation
            )
            stopping.wait(random.uniform(0.5, 1.5))
            return
        except StoreError as exc:
            log.log(
                logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.WARNING,
                "instance %s: release failed (%s); retrying",
                instance_id,
                exc,
            )
        stopping.wait(delay)
        delay = min(delay * 2, 2.0)
