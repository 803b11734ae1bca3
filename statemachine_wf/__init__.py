"""statemachine_wf: durable, crash-safe state-machine workflows on an append-only log.

Write a workflow::

    class Payout(Workflow[PayoutInput, PayoutProgress]):
        workflow_type = "payments.payout.v1"

        @step(initial=True, to="send")
        def reserve(self, ctx): ...

Start it with :class:`Client`, run it with :class:`Runner` (or ``statemachine-wf worker``).
"""

from .client import Client
from .config import Config
from .context import ReconcileContext, Reconciliation, StepContext
from .errors import (
    ConcurrencyConflict,
    DataRejected,
    DefinitionError,
    Fail,
    InputError,
    InvalidState,
    LeaseLost,
    MissingDependencies,
    NotFound,
    Parked,
    PayloadTooLarge,
    ProgressConflict,
    Retry,
    SchemaTooNew,
    Snooze,
    Stall,
    StepFailure,
    StoreError,
    StoreUnavailable,
    TypeKindConflict,
    UndeclaredTransition,
    UnknownWorkflowType,
    Waiting,
    WaitTimeout,
    WorkflowError,
)
from .events import EventRecord, Status
from .retry import RetryPolicy
from .runner import Runner, RunnerOptions
from .signers import SignerQueue, signer_queues
from .store import InstanceRecord, Store
from .stores import open_store
from .workflow import COMPLETED, Workflow, WorkflowSpec, reconcile, step

__all__ = [
    "COMPLETED",
    "Client",
    "ConcurrencyConflict",
    "Config",
    "DataRejected",
    "DefinitionError",
    "EventRecord",
    "Fail",
    "InputError",
    "InstanceRecord",
    "InvalidState",
    "LeaseLost",
    "MissingDependencies",
    "NotFound",
    "Parked",
    "PayloadTooLarge",
    "ProgressConflict",
    "ReconcileContext",
    "Reconciliation",
    "Retry",
    "RetryPolicy",
    "Runner",
    "RunnerOptions",
    "SchemaTooNew",
    "SignerQueue",
    "Snooze",
    "Stall",
    "Status",
    "StepContext",
    "StepFailure",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "TypeKindConflict",
    "UndeclaredTransition",
    "UnknownWorkflowType",
    "WaitTimeout",
    "Waiting",
    "Workflow",
    "WorkflowError",
    "WorkflowSpec",
    "open_store",
    "reconcile",
    "signer_queues",
    "step",
]
