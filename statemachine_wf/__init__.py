"""statemachine_wf: durable, crash-safe state-machine workflows on an append-only log.

Write a workflow::

    class Payout(Workflow[PayoutInput, PayoutProgress]):
        workflow_type = "payments.payout.v1"

        @step(initial=True, to="send")
        def reserve(self, ctx): ...

Start it with :class:`Client`, run it with :class:`Runner` (or ``statemachine-wf worker``).
"""

from .client.machine import Client
from .client.signers import SignerQueue, signer_queues
from .core.store import InstanceRecord, Store
from .definition.config import Config
from .definition.events import EventRecord, Status
from .definition.retry import RetryPolicy
from .definition.workflow import COMPLETED, Workflow, WorkflowSpec, reconcile, step
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
from .runtime.context import ReconcileContext, Reconciliation, StepContext
from .runtime.runner import Runner, RunnerOptions
from .stores import open_store

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
