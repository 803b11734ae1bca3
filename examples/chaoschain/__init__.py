"""ChaosChain: evidence on Arweave, work, scores and epochs on an Ethereum contract.

Run the end-to-end demo (starts anvil and arlocal, stops them when done)::

    python -m examples.chaoschain

See :mod:`examples.chaoschain.workflows` for the three workflows and the failure table,
and :mod:`examples.chaoschain.demo` for the demo and its kill/resume mode. Worker
processes get the workflows' dependencies from the environment with
:func:`dependencies` (see :mod:`examples.chaoschain.deps`)::

    statemachine-wf -m examples.chaoschain.workflows worker \\
        --deps examples.chaoschain:dependencies
"""

from __future__ import annotations

from .deps import dependencies
from .workflows import (
    SEED_RETRY,
    ChainProgress,
    ChaosChainSettings,
    CloseEpoch,
    CloseInput,
    ScoreInput,
    ScoreSubmission,
    WorkInput,
    WorkProgress,
    WorkSubmission,
    data_hash_of,
)

WORKFLOWS = (WorkSubmission, ScoreSubmission, CloseEpoch)
"""The three workflow classes, for ``Runner(store, WORKFLOWS, ...)``."""

__all__ = [
    "SEED_RETRY",
    "WORKFLOWS",
    "ChainProgress",
    "ChaosChainSettings",
    "CloseEpoch",
    "CloseInput",
    "ScoreInput",
    "ScoreSubmission",
    "WorkInput",
    "WorkProgress",
    "WorkSubmission",
    "data_hash_of",
    "dependencies",
]
