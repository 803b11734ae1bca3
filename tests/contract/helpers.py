"""What several role contracts need: an instance a runner holds, and a finished one.

Instances are made with ``new`` of ``tests/integration/core/test_store_contract.py``;
everything here goes through the port (``Store``) and the pure core (``decide``).
"""

from __future__ import annotations

from statemachine_wf.core import decide
from statemachine_wf.core.store import Claim, Commit, Store
from tests.integration.core.test_store_contract import new

TYPE = "c.thing.v1"
"""The type ``new`` creates by default."""


def claim_one(store: Store, *, worker: str = "w", type_: str = TYPE, lease: float = 300) -> Claim:
    """The single due task of ``type_``, claimed (the claim starts its step)."""
    claims = store.claim(worker=worker, types=[type_], lease=lease)
    assert len(claims) == 1, claims
    return claims[0]


def cancelled(store: Store, instance_id: str) -> int:
    """Cancel an unleased instance (one commit: CANCELLED, its task gone); the new version."""
    rec = store.get(instance_id)
    assert rec is not None
    d = decide.cancel(rec.projection(), leased=False)
    return store.apply(Commit(instance_id, rec.version, d, None))


def started(store: Store, *, worker: str = "w", type_: str = TYPE) -> Claim:
    """A new instance of ``type_``, claimed by ``worker`` (the claim starts its first step)."""
    instance_id = new(store, type_=type_)
    claim = claim_one(store, worker=worker, type_=type_)
    assert claim.instance.id == instance_id
    return claim
