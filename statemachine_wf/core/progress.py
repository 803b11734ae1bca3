"""Set-once progress: a field, once set to a value other than None, never changes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from ..definition.limits import check_value
from ..errors import InputError, ProgressConflict


def merge_progress(
    model: type[BaseModel], current: Mapping[str, Any], delta: Mapping[str, Any]
) -> dict[str, Any]:
    """Return ``current`` with ``delta`` applied, validated by ``model``, in JSON form.

    Setting a field to the value it already has is a no-op (a retried step may do it);
    setting it to another value raises :class:`ProgressConflict` and nothing changes.
    Unknown fields raise :class:`InputError`; values of the wrong type raise
    ``pydantic.ValidationError`` naming the field.
    """
    unknown = sorted(set(delta) - set(model.model_fields))
    if unknown:
        raise InputError(
            f"{model.__name__} has no field(s) {unknown}; declared: {sorted(model.model_fields)}"
        )
    validated = model.model_validate({**current, **delta}).model_dump(mode="json")
    for key in delta:
        check_value(f"progress.{key}", validated[key])  # what no store can keep: InputError
    for key in delta:
        old = current.get(key)
        new = validated[key]
        if old is not None and old != new:
            raise ProgressConflict(key, old, new)
    return {**current, **{k: validated[k] for k in delta}}
