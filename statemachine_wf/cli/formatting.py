"""Parsing of JSON arguments and formatting of output shared by the commands: times,
events and instance records as the ``--json`` forms print them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ..definition.limits import MAX_JSON_DEPTH, nests_deeper
from ..definition.wait_tokens import hide_token


def _when(ts: float) -> str:
    # UTC whatever the machine's timezone (status labels it so), to the millisecond.
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _json_arg(flag: str, text: str) -> Any:
    """``text`` decoded as JSON, or a ValueError naming ``flag`` and the problem.

    JSON nested deeper than the library takes
    (:data:`~statemachine_wf.definition.limits.MAX_JSON_DEPTH`) is refused before it is decoded:
    Python's decoder recurses, so it raises a RecursionError near the recursion limit, or with the
    limit raised (``py_ecc``, which the chain workflows import, sets 100,000) overflows the C stack
    and crashes. An integer of more digits than Python converts is refused by name too.
    """
    if nests_deeper(text, MAX_JSON_DEPTH):
        raise ValueError(
            f"{flag} nests deeper than {MAX_JSON_DEPTH} levels (the limit); nothing was written"
        )
    # Every failure is a ValueError naming the flag: main() prints it as one "error:" line
    # and exits 2, nothing written (the property test of every data argument expects it).
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag} is not JSON: {exc}") from exc
    except RecursionError:  # not expected past the depth check; never a traceback
        raise ValueError(f"{flag} nests too deep to decode; nothing was written") from None
    except ValueError as exc:  # the only other: an integer longer than Python converts
        reason = str(exc).split(":", 1)[0]  # "Exceeds the limit (4300 digits) for ..."
        raise ValueError(
            f"{flag} holds an integer too large to store ({reason}); nothing was written"
        ) from exc


def _event_dict(e: Any) -> dict[str, Any]:
    return {
        "seq": e.seq,
        "event_type": e.event_type,
        "node": e.node,
        "attempt": e.attempt,
        "payload": e.payload,
        "error": e.error,
        "worker": e.worker,
        "created_at": e.created_at,
    }


def _record_dict(r: Any) -> dict[str, Any]:
    return {
        "id": r.id,
        "type": r.type,
        "status": str(r.status),
        "step": r.step,
        "step_attempts": r.step_attempts,
        "version": r.version,
        "input": r.input,
        "progress": r.progress,
        "error": r.error,
        "cancel_requested": r.cancel_requested,
        # A wait's token can be an approval link's secret: shown as signals shows it.
        "waiting": None if r.wait is None else hide_token(r.wait),
    }
