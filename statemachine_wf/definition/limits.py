"""Size limits on what producers hand the runtime, checked before anything is written.

A payload (a run's input, a signal's payload) is measured as the compact JSON the store
keeps. The default limit is 256 KiB, like Temporal's default blob warning size scaled down
for a row in a relational table; ``SWF_MAX_PAYLOAD_BYTES`` changes it. The SQL producer
paths check the limit too, read from the ``wf_settings`` row ``max_payload_bytes``
(migrations 006 and 009); PostgreSQL measures the JSON text it stores (a space after each ``,`` and
``:``), so near the limit it can refuse what this module's compact measure let through.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

from ..errors import DataRejected, DefinitionError, InputError, PayloadTooLarge
from .config import Config

DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024


def max_payload_bytes() -> int:
    """The limit in force: ``SWF_MAX_PAYLOAD_BYTES`` if set, else 256 KiB."""
    configured = configured_max_payload_bytes()
    return DEFAULT_MAX_PAYLOAD_BYTES if configured is None else configured


def configured_max_payload_bytes() -> int | None:
    """``SWF_MAX_PAYLOAD_BYTES`` if set (validated), else None.

    ``migrate`` writes it to the ``wf_settings`` row ``max_payload_bytes`` that the SQL
    producer paths (``swf_start``, the ``wf_start`` view, inserts into ``wf_signals``)
    check; when it is not set the row keeps its value.
    """
    return Config.payload_limit_from_env()


def check_payload(what: str, value: Any, limit: int | None = None) -> int:
    """Return the JSON size of ``value`` in bytes, after :func:`check_value`.

    Raises:
        InputError: a value no store can keep (too deep, a NUL, a lone surrogate, NaN):
            names ``what`` and the path inside it.
        PayloadTooLarge: it is over ``limit`` (default :func:`max_payload_bytes`); the
            message names ``what``, the size and the limit.
    """
    # Compact separators: the size is that of the JSON the store keeps, not of a pretty
    # form. default=str sizes an unusual value (a datetime) as the text it would become.
    try:
        text: str | None = json.dumps(value, separators=(",", ":"), default=str, allow_nan=False)
    except (ValueError, RecursionError):
        # NaN, a circular or too deep value: the walk below names the place and refuses it.
        text = None
    if text is None or _suspect(text, MAX_JSON_DEPTH):
        check_value(what, value)  # walks the value only when the text says it may be poison
    if text is None:
        # The walk found nothing it knows: encode again so json raises its own error.
        text = json.dumps(value, separators=(",", ":"), default=str)
    size = len(text.encode())
    cap = max_payload_bytes() if limit is None else limit
    if size > cap:
        raise PayloadTooLarge(what, size, cap)
    return size


def max_dag_bytes() -> int:
    """The largest DAG definition, as JSON bytes: ``SWF_MAX_DAG_BYTES``, else 2 MiB."""
    return Config.dag_limit_from_env("SWF_MAX_DAG_BYTES")


def max_dag_nodes() -> int:
    """The most nodes in one DAG definition: ``SWF_MAX_DAG_NODES``, else 10,000."""
    return Config.dag_limit_from_env("SWF_MAX_DAG_NODES")


def check_dag_size(name: str, size: int | None, nodes: int | None) -> None:
    """Refuse a DAG definition of ``size`` JSON bytes or ``nodes`` nodes over the limits.

    Raises:
        DefinitionError: naming the limit, the value and the setting that changes it.
    """
    problems = []
    if size is not None and size > (limit := max_dag_bytes()):
        problems.append(
            f"the definition is {size} bytes; the limit is {limit} bytes (SWF_MAX_DAG_BYTES)"
        )
    if nodes is not None and nodes > (limit := max_dag_nodes()):
        problems.append(f"it has {nodes} nodes; the limit is {limit} (SWF_MAX_DAG_NODES)")
    if problems:
        raise DefinitionError(f"DAG {name!r}", problems)


MAX_JSON_DEPTH = 64
"""How deep a JSON value (an input, a signal payload, progress, a node output) may nest:
64 levels of objects and arrays. Python's JSON decoder gives up near 1,000 levels, so a
value nested deeper than that could be stored but never read back; 64 leaves room for any
real document. The SQL producer paths (``swf_start``, ``wf_start``, ``wf_signals``) refuse
deeper values too (migration 010)."""

MAX_STORED_DEPTH = MAX_JSON_DEPTH + 16
"""What the stores' own check (:func:`checked_dumps`) allows: a value at the limit wrapped
by the runtime (an event's ``{"input": ...}``, a dead letter's envelope) nests a little
deeper; still far from the 1,000 levels Python can decode."""

# A lone surrogate is not Unicode: PostgreSQL refuses it (and its \\ud800 escape in jsonb)
# where SQLite would keep the escape json.dumps writes. Refused everywhere, stores agree.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_INT_BITS = 13_000  # about 3,900 digits: under Python's int-to-str limit (4,300 digits)
# The escapes json.dumps writes for a NUL (always) or a surrogate (with ensure_ascii, the
# default every caller keeps): seen in the text, they send the value to the full walk.
_ESCAPED_POISON = re.compile(r"\\u(?:0000|d[89a-f][0-9a-f]{2})")


def text_problem(text: str) -> str | None:
    """What PostgreSQL cannot store in ``text`` (a NUL, a lone surrogate), or None."""
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which PostgreSQL cannot store"
    found = _LONE_SURROGATE.search(text)
    if found is not None:
        return f"contains a lone surrogate (\\u{ord(found.group()):04x}), which is not Unicode"
    return None


def _step(path: str, key: object) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"


def value_problem(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> tuple[str, str] | None:
    """The first place in ``value`` that some store cannot keep, as ``(path, problem)``.

    Refused everywhere (so SQLite and PostgreSQL accept and refuse the same values):
    nesting deeper than ``max_depth``, a NUL or a lone surrogate in a string or a key,
    NaN or an infinity, an integer of more than about 3,900 digits. The path starts at
    ``$`` (``$.items[3].name``). Iterative: a value nested 100,000 deep is measured
    without recursion.
    """
    # An explicit stack, not recursion: the value comes from a producer, and a recursive
    # walk of a deep one would raise RecursionError before it could name the path.
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return path, problem
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, float):
            if not math.isfinite(item):
                return path, f"is {item}, which is not a JSON number"
        elif isinstance(item, int):
            if item.bit_length() > _MAX_INT_BITS:
                return path, "is an integer too large to store"
        elif isinstance(item, dict | list | tuple):
            if depth >= max_depth:
                # The path of a too-deep value is itself long: cut so the message stays short.
                shown = path if len(path) <= 120 else path[:117] + "..."
                return shown, f"nests deeper than {max_depth} levels (the limit)"
            if isinstance(item, dict):
                for key, child in item.items():
                    if isinstance(key, str):
                        problem = text_problem(key)
                        if problem is not None:
                            return path, f"has a key that {problem}"
                    stack.append((child, _step(path, key), depth + 1))
            else:
                for index, child in enumerate(item):
                    stack.append((child, _step(path, index), depth + 1))
    return None


def check_value(what: str, value: Any) -> None:
    """Refuse a value some store cannot keep (see :func:`value_problem`).

    Raises:
        InputError: names ``what``, the path inside it and the problem, e.g.
            ``input.items[3].name contains a NUL character``.
    """
    found = value_problem(value)
    if found is not None:
        path, problem = found
        where = what + path[1:]
        raise InputError(f"{where} {problem}; nothing was written", path=where, problem=problem)


def _suspect(text: str, depth: int) -> bool:
    """Whether JSON ``text`` may nest deeper than ``depth`` or hold a NUL or a surrogate
    (then the value is walked; the common value is not)."""
    # The depth is measured on the text (C-speed passes, nests_deeper): the walk, in
    # Python, took 1.6 ms for a definition of a hundred nodes, whose brackets the crude
    # count of them had always taken for a deep value.
    return nests_deeper(text, depth) or _ESCAPED_POISON.search(text) is not None


_ENCODERS = {
    False: json.JSONEncoder(allow_nan=False, separators=(",", ":")),
    True: json.JSONEncoder(allow_nan=False, separators=(",", ":"), sort_keys=True),
}
"""The two encoders of :func:`checked_dumps`, made once: ``json.dumps`` with options
builds a new encoder for every call, and a step encodes half a dozen values. Each
``encode`` call still makes its own circular-reference markers, so they are shared by
threads safely."""

_EMPTY = {dict: "{}", list: "[]", type(None): "null"}
"""The text of the values most columns hold most of the time (no error, no signals
settled, no waits), without an encoder."""


def checked_dumps(value: Any, *, sort_keys: bool = False, max_depth: int = MAX_STORED_DEPTH) -> str:
    """``json.dumps(value)`` for a store, refusing what some store cannot keep.

    The one check both stores' write paths share, so a value PostgreSQL refuses is refused
    on SQLite too, with the same message. Cheap for the common value: it encodes first,
    and walks the value only when the text shows brackets enough to be too deep or an
    escape that may be a NUL or a surrogate. No spaces; ``sort_keys`` for text that is
    kept as it is written (SQLite's columns), not where the server parses it (jsonb),
    since sorting is a third of the time of a decision's batch item. ``max_depth``: for
    a value that holds stored values one level down (a batch item).

    Raises:
        DataRejected: names the path inside the value and the problem.
    """
    empty = _EMPTY.get(type(value))
    if empty is not None and not value:
        return empty
    encoder = _ENCODERS[sort_keys]
    try:
        text: str | None = encoder.encode(value)
    except (ValueError, RecursionError):
        text = None
    if text is None or _suspect(text, max_depth):
        found = value_problem(value, max_depth=max_depth)
        if found is not None:
            path, problem = found
            raise DataRejected(f"value refused: {path} {problem}", path=path, problem=problem)
        if text is None:  # not a problem the walk knows: let json say what it is
            text = encoder.encode(value)
    return text


def nests_deeper(text: str, limit: int) -> bool:
    """Whether the arrays and objects of JSON ``text`` nest deeper than ``limit``.

    Counted without decoding (brackets inside strings skipped), because decoding is what
    must not happen: Python's decoder recurses, so a deep value raises RecursionError
    near the recursion limit, and with the limit raised (``py_ecc``, which the chain
    adapters import, sets 100,000) it overflows the C stack and kills the process.
    Linear in ``len(text)``; text with few brackets is not scanned at all.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    # Strings first (their brackets are data). With the escaped backslashes and quotes
    # gone, every quote opens or closes a string, as the decoder splits the text (up to
    # where it would fail on text that is not JSON). Every byte but a quote or a bracket
    # goes, and one kind of bracket stands for both (JSON closes what it opens). Then two
    # quotes in a row (an empty string, or the gap between two strings) go, and what
    # stays between quotes, a string's brackets, goes: what is left is the nesting. All
    # in C: a regex and a running sum in Python took 0.8 ms for a definition of a
    # hundred nodes, on every read and write of it.
    plain = text.replace("\\\\", "").replace('\\"', "").encode(errors="replace")
    brackets = plain.translate(_ONE_KIND, _NOT_SYNTAX).replace(b'""', b"")
    if b'"' in brackets:
        brackets = b"".join(brackets.split(b'"')[::2])
    # Each pass takes away the innermost pairs: one level of balanced text (bytes.replace
    # does not look again at the pair its removal joins). A wide value is mostly gone in a
    # few passes; where a pass takes less than half (a long chain), what is left is counted:
    # its running sum is the depth at each point.
    left, passes = brackets, 0
    while left and passes <= limit:
        shorter = left.replace(b"[]", b"")
        if 2 * len(shorter) > len(left):
            break
        left, passes = shorter, passes + 1
    depths = list(accumulate(1 if c == _OPEN else -1 for c in left))
    if depths and (min(depths) < 0 or depths[-1] != 0):  # not balanced: not JSON
        depths, passes = list(accumulate(1 if c == _OPEN else -1 for c in brackets)), 0
    return passes + max(depths, default=0) > limit


_ONE_KIND = bytes.maketrans(b"{}", b"[]")
_NOT_SYNTAX = bytes(set(range(256)) - set(b'[]{}"'))
_OPEN = ord("[")
