"""Hypothesis strategies for workflow inputs and for the outcomes of step actions.

An *outcome* is what the test harness makes of one run of an action: let the author's
action run (:class:`Proceed`), run it and override its transition (:class:`Return`), or
raise an error before or after it runs (:class:`Raise`, "after" meaning the side effect
happened and then the call failed, like a timeout after a broadcast).

    from statemachine_wf.testing import from_model, outcomes

    inputs = from_model(OrderInput, amount=st.integers(1, 10_000))
    charge = outcomes(errors=[Retry("card network"), Stall("3-D secure")])
"""

from __future__ import annotations

import copy
import math
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, Union

from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from ..errors import Fail, Retry, Stall

ModelT = TypeVar("ModelT", bound=BaseModel)


class Outcome:
    """Base of what the harness does with one run of an action."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Proceed(Outcome):
    """Run the author's action and use what it returns."""

    def __repr__(self) -> str:
        return "Proceed()"


@dataclass(frozen=True, slots=True)
class Return(Outcome):
    """Run the action (unless ``run`` is false), then return ``value`` as the transition."""

    value: object
    run: bool = True


@dataclass(frozen=True, slots=True)
class Raise(Outcome):
    """Raise ``error`` before the action runs, or after it ran when ``after`` is true."""

    error: BaseException
    after: bool = False

    def exception(self) -> BaseException:
        """A fresh copy of the error, so tracebacks do not pile up across raises."""
        return copy.copy(self.error)

    def __repr__(self) -> str:
        return f"Raise({self.error!r}, after={self.after})"


DEFAULT_ERRORS: tuple[BaseException, ...] = (
    Retry("injected transient error"),
    Stall("injected stall"),
    Fail("injected failure"),
    RuntimeError("injected crash of the action"),
)
"""What :func:`outcomes` raises by default: one of each class the runtime tells apart."""


def outcomes(
    *,
    errors: Iterable[BaseException] = DEFAULT_ERRORS,
    returns: Iterable[object] = (),
    failure_percent: int = 25,
) -> st.SearchStrategy[Outcome]:
    """A strategy of outcomes for one step's action.

    Args:
        errors: the exceptions to inject (instances; each raise uses a copy). Exception
            classes map through the step's ``errors`` map just as real ones do.
        returns: transitions to force (after the action ran), e.g. both branches of a
            choice the action would otherwise make from the outside world.
        failure_percent: how often (in %) an error is injected rather than the action
            allowed to finish; shrinking moves towards :class:`Proceed`.
    """
    if not 0 <= failure_percent <= 100:
        raise ValueError(f"failure_percent must be within 0..100, got {failure_percent}")
    errs = tuple(errors)
    rets = tuple(returns)
    succeed: st.SearchStrategy[Outcome] = st.just(Proceed())
    if rets:
        succeed = st.one_of(succeed, st.sampled_from([Return(r) for r in rets]))
    if not errs or failure_percent == 0:
        return succeed
    fail: st.SearchStrategy[Outcome] = st.builds(Raise, st.sampled_from(errs), after=st.booleans())
    # Failures at the top of the range: hypothesis shrinks the integer towards 0, so a
    # shrunk example proceeds wherever the failure is not needed to break the workflow.
    return st.integers(0, 99).flatmap(lambda n: fail if n >= 100 - failure_percent else succeed)


def always(outcome: Outcome | None = None) -> st.SearchStrategy[Outcome]:
    """Every run of the step gets ``outcome`` (default :class:`Proceed`)."""
    return st.just(outcome if outcome is not None else Proceed())


def from_model(
    model: type[ModelT], /, **fields: st.SearchStrategy[Any]
) -> st.SearchStrategy[ModelT]:
    """Valid instances of a pydantic model, built field by field.

    Each field is drawn from its annotation (constraints such as ``Field(ge=1)`` included,
    through ``annotated-types``); pass a strategy by keyword to override a field. Floats
    are finite, and only values that survive a JSON round trip are kept, since that is
    how the store keeps an input.
    """
    unknown = sorted(set(fields) - set(model.model_fields))
    if unknown:
        raise TypeError(f"{model.__name__} has no field(s) {unknown}")
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for name, info in model.model_fields.items():
        if name in fields:
            parts[name] = fields[name]
            continue
        parts[name] = _annotation_strategy(info.annotation, tuple(info.metadata))
        if not info.is_required():
            parts[name] = st.one_of(
                st.just(info.get_default(call_default_factory=True)), parts[name]
            )

    def build(values: dict[str, Any]) -> ModelT | None:
        try:
            obj = model.model_validate(values)
            again = model.model_validate_json(obj.model_dump_json())
        except (ValidationError, ValueError):
            return None
        return obj if again == obj else None

    return (
        st.fixed_dictionaries(parts)
        .map(build)
        .filter(lambda obj: obj is not None)
        .map(lambda obj: typing.cast(ModelT, obj))
    )


def _annotation_strategy(annotation: Any, metadata: Sequence[Any]) -> st.SearchStrategy[Any]:
    # pydantic keeps `pattern` (and a few more) in its own metadata object, which
    # hypothesis does not read: handle the pattern, leave the rest to validation.
    pattern = next((m.pattern for m in metadata if getattr(m, "pattern", None)), None)
    known = tuple(m for m in metadata if type(m).__module__.startswith("annotated_types"))
    if annotation is str and pattern is not None:
        low = next((m.min_length for m in known if hasattr(m, "min_length")), 0)
        high = next((m.max_length for m in known if hasattr(m, "max_length")), None)
        return st.from_regex(pattern, fullmatch=True).filter(
            lambda v: len(v) >= low and (high is None or len(v) <= high)
        )
    if annotation is float and not known:
        return st.floats(allow_nan=False, allow_infinity=False)
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType) and not known:
        return st.one_of(*(_annotation_strategy(a, ()) for a in typing.get_args(annotation)))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return from_model(annotation)
    target: Any = Annotated[(annotation, *known)] if known else annotation
    base: st.SearchStrategy[Any] = st.from_type(target)
    return base.filter(lambda v: not (isinstance(v, float) and not math.isfinite(v)))
