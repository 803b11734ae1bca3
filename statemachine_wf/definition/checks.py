"""Checks of what a caller hands the clients and the CLI: ids, priorities, delays, text.

Each check names the problem in an :class:`~statemachine_wf.errors.InputError` and
writes nothing; both clients call them before touching the store, so a malformed value
is the same error on SQLite and PostgreSQL (never a driver error).
"""

from __future__ import annotations

import math
import time
import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import MAX_DURATION, InputError, NotFound
from .limits import text_problem


def invalid_input(where: str, model: type[BaseModel], exc: ValidationError) -> InputError:
    """The :class:`InputError` for ``exc``: each failing field and its problem, no values
    (an input may hold secrets); pydantic's error is the ``__cause__`` (raise ``from``)."""
    fields = tuple(
        (".".join(str(p) for p in e["loc"]) or "(input)", e["msg"]) for e in exc.errors()
    )
    problems = "; ".join(f"{field}: {msg}" for field, msg in fields)
    return InputError(f"{where} does not fit {model.__name__}: {problems}", fields=fields)


class InvalidId(InputError, NotFound):
    """An instance id that is not a UUID: bad input (an :class:`InputError`), and so also
    certainly no instance (a :class:`NotFound`, which callers catching that still see)."""


MAX_PRIORITY = 2**31 - 1
"""The largest priority (the database column is a 32-bit integer)."""


def check_id(instance_id: Any, name: str = "instance_id") -> str:
    """``instance_id`` as given, if it is a UUID in its canonical form (lowercase hex,
    hyphenated, as ``str(uuid.UUID(...))`` writes it); else :class:`InvalidId`.

    Every Client and DagClient method taking an instance id checks it first, so a
    malformed id is the same error on both stores (never a driver error, never NotFound).
    Other spellings of a UUID (upper case, braces, ``urn:uuid:``, no hyphens) are refused
    too, naming the canonical form: PostgreSQL's ``uuid`` column would read them as that
    id, but SQLite keeps ids as text, where they name no instance, so one call would find
    an instance on one store and not on the other (and a start would store another id).
    """
    # uuid.UUID's forms run from 32 characters (bare hex) to 45 ("urn:uuid:..."): any
    # other length is refused without being parsed.
    if isinstance(instance_id, str) and 32 <= len(instance_id) <= 45:
        try:
            canonical = str(uuid.UUID(instance_id))
        except ValueError:
            pass
        else:
            if instance_id == canonical:
                return instance_id
            raise InvalidId(
                f"no workflow instance {instance_id!r}: {name} must be a UUID in its "
                f"canonical form, lowercase and hyphenated: {canonical!r}"
            )
    # The message quotes a short string (a mistyped id is worth seeing) but only the type
    # of anything else, so a large or odd value never lands in a log line.
    shown = instance_id if isinstance(instance_id, str) and len(instance_id) <= 60 else None
    if shown is None:
        raise InvalidId(f"{name} must be a UUID, got a {type(instance_id).__name__}")
    raise InvalidId(f"no workflow instance {shown!r}: {name} must be a UUID")


def check_priority(priority: Any) -> int:
    # bool is an int subclass: True would pass as priority 1 without this.
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InputError(f"priority must be a whole number, got {priority!r}")
    if priority < 0:
        raise InputError(f"priority must be >= 0, got {priority}")
    if priority > MAX_PRIORITY:
        raise InputError(f"priority must be <= {MAX_PRIORITY}, got {priority}")
    return priority


def check_delay(delay: Any, name: str = "delay") -> float:
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise InputError(f"{name} must be a number of seconds, got {delay!r}")
    if delay < 0:
        raise InputError(f"{name} must be >= 0, got {delay}")
    # inf, NaN or 1e300 would become a due time not both stores can keep (MAX_DURATION):
    # refused here by name, the same on both, rather than as a driver's error.
    if not (math.isfinite(delay) and delay <= MAX_DURATION):
        raise InputError(
            f"{name} must be a finite number of seconds <= {MAX_DURATION:.0f}, got {delay}"
        )
    return float(delay)


def check_text(value: Any, name: str, *, optional: bool = True) -> str | None:
    """A non-empty string without NUL or lone surrogates (no store can keep those)."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise InputError(f"{name} must be a non-empty string, got {type(value).__name__}")
    problem = text_problem(value)
    if problem:
        raise InputError(f"{name} {problem}")
    return value


def check_schedule(priority: int, delay: float, run_at: datetime | None) -> None:
    check_priority(priority)
    check_delay(delay)
    if run_at is not None and not isinstance(run_at, datetime):
        raise InputError(f"run_at must be a datetime, got {type(run_at).__name__}")
    if run_at is not None and delay:
        raise InputError("give delay or run_at, not both")
    # A naive datetime is read in the machine's local zone by timestamp(): producers in
    # different zones would schedule the same value at different instants.
    if run_at is not None and run_at.tzinfo is None:
        raise InputError(f"run_at must be timezone-aware, got {run_at.isoformat()}")
    if run_at is not None and run_at.timestamp() - time.time() > MAX_DURATION:
        raise InputError(
            f"run_at must be at most {MAX_DURATION:.0f} seconds (100 years) from now, "
            f"got {run_at.isoformat()}"
        )
