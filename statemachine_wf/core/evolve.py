"""``evolve``: a dataclass instance with some fields changed, for the hot paths.

:func:`dataclasses.replace` looks at every field's kind and name on every call, then calls
the class with keyword arguments: 5 µs for the 22 fields of an ``InstanceRecord``, and a
DAG node made four such copies (bench/README.md, "Session 65"). ``evolve`` reads a class's
fields once, and calls it with its values by position, the changed ones in their places:
the same ``__init__`` (and ``__post_init__``) with the same values as ``replace``. A class
whose ``__init__`` takes anything but its fields, in their order, by position (an
``InitVar``, an ``init=False`` or keyword-only field) goes to ``replace``.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar

T = TypeVar("T")

_Plan = tuple[dict[str, int], Callable[[Any], tuple[Any, ...]]] | None
_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    """Each field's place in ``__init__``, and a getter of all of them in that order; None
    when ``replace`` must do the work."""
    names = [f.name for f in dataclasses.fields(cls)]
    params = list(inspect.signature(cls).parameters.values())
    positional = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)
    if len(names) < 2 or not positional or [p.name for p in params] != names:
        return None
    return {name: i for i, name in enumerate(names)}, attrgetter(*names)


def evolve(obj: T, **changes: Any) -> T:
    """``dataclasses.replace(obj, **changes)``, without its per-call look at the fields.

    The values are passed as they are, as ``replace`` passes them; a name in ``changes``
    that is not a field raises ``TypeError``, as ``replace`` does, but only when it runs:
    mypy checks ``replace``'s names and types against the class, not these. Kept for the
    few copies on a hot path, each one run by the tests.
    """
    cls = type(obj)
    try:
        plan = _PLANS[cls]
    except KeyError:
        plan = _PLANS[cls] = _plan(cls)
    if plan is None:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    places, values = plan
    args = list(values(obj))
    for name, value in changes.items():
        try:
            args[places[name]] = value
        except KeyError:
            raise TypeError(
                f"{cls.__name__}.__init__() got an unexpected keyword argument {name!r}"
            ) from None
    return cls(*args)
