"""``{{ctx.path}}`` templates over a workflow context.

A string that is exactly one expression (``"{{ctx.input.id}}"``) resolves to the value
with its type (a number stays a number, a list a list); a string with other text around
expressions (``"id_{{ctx.input.id}}"``) is interpolated into a string (mappings and
lists as JSON). Paths are dotted keys and list indexes (``ctx.items.0.name``); a missing
one is a :class:`TemplateError` naming the whole path and the part that is missing.
Nothing is evaluated: a path is looked up, never run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ..errors import WorkflowError

# No braces inside: templates do not nest, and the path in them is only ever looked up.
_EXPR = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
# A list index: ASCII digits with an optional minus, short enough for int() ("²" and
# "--1" pass str.isdigit() after lstrip("-") but int() refuses them; an Arabic-Indic one it reads).
_INDEX = re.compile(r"-?[0-9]{1,18}")


class TemplateError(WorkflowError):
    """A template names a path the context does not have."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        super().__init__(f"template {{{{{path}}}}}: {reason}")


def lookup(path: str, ctx: Mapping[str, Any]) -> Any:
    """The value at ``ctx.a.b.0`` in ``ctx`` (the leading ``ctx`` is required)."""
    parts = path.split(".")
    if parts[0] != "ctx":
        raise TemplateError(path, "a path must start with 'ctx'")
    value: Any = ctx
    walked = "ctx"
    for part in parts[1:]:
        if isinstance(value, Mapping):
            if part not in value:
                # A context can hold thousands of keys: the message names the first 20.
                known = ", ".join(sorted(map(str, value))[:20])
                raise TemplateError(path, f"no key {part!r} in {walked} (keys: {known})")
            value = value[part]
        elif isinstance(value, list | tuple):
            if not _INDEX.fullmatch(part) or not -len(value) <= int(part) < len(value):
                raise TemplateError(path, f"no index {part!r} in {walked} (length {len(value)})")
            value = value[int(part)]
        else:
            raise TemplateError(path, f"{walked} is a {type(value).__name__}, not a mapping")
        walked += "." + part
    return value


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    # sort_keys: the same context renders the same text on both stores (PostgreSQL's
    # jsonb keeps no key order), so a rendered key or id is stable across re-runs.
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def resolve(value: Any, ctx: Mapping[str, Any]) -> Any:
    """Resolve every template inside ``value`` (strings, and mappings/lists recursively)."""
    if isinstance(value, str):
        whole = _EXPR.fullmatch(value.strip())
        # Only an exact "{{...}}" keeps the value's type; with spaces around it the author
        # wrote text, and gets text.
        if whole is not None and value.strip() == value:
            return lookup(whole.group(1), ctx)
        return _EXPR.sub(lambda m: _text(lookup(m.group(1), ctx)), value)
    if isinstance(value, Mapping):
        return {k: resolve(v, ctx) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [resolve(v, ctx) for v in value]
    return value
