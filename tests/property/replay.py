"""The uncrashed reference run of a crashed one, as the helper's final check makes it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from statemachine_wf.core.store import InstanceRecord
from statemachine_wf.definition.workflow import Workflow
from statemachine_wf.testing import Stepper, committed_outcomes, sqlite_store
from statemachine_wf.testing.machine import _replaying  # the helper's own final check


def reference_run(
    workflow: type[Workflow[Any, Any]],
    path: str,
    crashed: Stepper,
    input: BaseModel,
    dependencies: Mapping[str, Any],
) -> tuple[InstanceRecord, Stepper]:
    """``crashed``'s committed outcomes replayed with no crash, on a fresh store at ``path``
    and ``dependencies`` (a fresh world): the uncrashed run's end, and its stepper (closed;
    its store still open, to read)."""
    reference = Stepper(
        workflow,
        sqlite_store(path),
        dependencies=dependencies,
        outcomes=_replaying(committed_outcomes(crashed)),
    )
    reference.start(input)
    try:
        return reference.run_to_end(), reference
    finally:
        reference.close()
