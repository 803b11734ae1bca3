"""A runner restarted under a stable worker id hands back the leases of its dead lives.

Every Runner object is its own incarnation (``host:pid:random``), the prefix of the lease
token of each claim it takes; two runners given the same worker id never extend or release
each other's leases. Only an incarnation known dead is released: one of this host whose
process is gone.
"""

from __future__ import annotations

import logging
import os
import socket

from ..core.store import Store

log = logging.getLogger("statemachine_wf.runner")


def dead_here(incarnation: str, host: str) -> bool:
    """Is ``incarnation`` (host:pid:random) a process of ``host`` that no longer runs?

    The process of this runner counts as alive (another Runner object in it may hold the
    leases), as does one we cannot see (another host, a pid we may not signal).
    """
    parts = incarnation.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def release_dead_twins(store: Store, worker_id: str, incarnation: str) -> None:
    """Restarted under ``worker_id``: hand back the leases of its earlier lives.

    A live twin (another process given the same id, here or on another host) keeps its
    leases; those of a dead one elsewhere simply run out (nobody extends them).
    """
    host = socket.gethostname()
    for other in store.lease_incarnations(worker=worker_id):
        if other == incarnation or not dead_here(other, host):
            continue
        log.info("worker %s: releasing the leases of dead runner %s", worker_id, other)
        store.release(worker=worker_id, incarnation=other)
