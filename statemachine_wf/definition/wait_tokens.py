"""What people and scripts are shown of a wait's token: only whether there is one.

A wait's token can be the secret of an approval link (a signal that carries it is applied
to that wait), so the reads meant for people and scripts (``signals``, ``history`` and the
dashboard's event views) never print it. The one rule, used by all of them: a ``token``
field is replaced by ``tokened``, true when there was a token. The store keeps the token;
``Client.get(id).wait`` and the events read through the store API still carry it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .events import Ev, EventRecord

__all__ = ["TOKENED_EVENTS", "hide_token", "shown_event", "token_label"]

TOKENED_EVENTS = frozenset({Ev.WAIT_TOKEN, Ev.STEP_WAITING})
"""The events whose payload's ``token`` is a wait's token. Only these are rewritten: other
payloads are the workflow's own data, where ``token`` may be an ERC-20 address."""


def hide_token(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` with ``token`` replaced, in place, by ``tokened``: whether it was set."""
    return {
        ("tokened" if k == "token" else k): (v is not None if k == "token" else v)
        for k, v in fields.items()
    }


def token_label(token: str | None) -> str:
    """The same rule in words, for a table or a line."""
    return "token" if token is not None else "no token"


def shown_event(event: EventRecord) -> EventRecord:
    """``event`` as shown: a wait's token hidden by :func:`hide_token`."""
    if event.event_type not in TOKENED_EVENTS or "token" not in event.payload:
        return event
    return dataclasses.replace(event, payload=hide_token(event.payload))
