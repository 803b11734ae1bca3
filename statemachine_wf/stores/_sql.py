"""Loading named queries and numbered migrations from the package's ``sql/`` folder."""

from __future__ import annotations

import re
import sqlite3
from functools import cache
from importlib import resources

# A section starts only at a line that is nothing but ``-- name: <word>``; any other
# comment line stays in its query's text (split_statements drops it for SQLite).
_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@cache
def queries(dialect: str) -> dict[str, str]:
    """The ``-- name: x`` sections of ``sql/<dialect>/queries.sql``, loaded once."""
    text = resources.files("statemachine_wf").joinpath("sql", dialect, "queries.sql").read_text()
    parts = _NAME.split(text)
    return {parts[i]: parts[i + 1].strip().rstrip(";") for i in range(1, len(parts), 2)}


def without_comment_lines(text: str) -> str:
    """``text`` without its whole-line ``--`` comments and blank lines.

    Whole lines only: a ``--`` after code may sit inside a string literal, and is left.
    """
    return "\n".join(
        line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("--")
    )


@cache
def migrations(dialect: str) -> list[tuple[int, str]]:
    """``(number, script)`` for every ``NNN_*.sql`` in ``sql/<dialect>/``, in order."""
    folder = resources.files("statemachine_wf").joinpath("sql", dialect)
    found = []
    for entry in folder.iterdir():
        match = re.match(r"^(\d{3})_.*\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text()))
    return sorted(found)


def split_statements(script: str) -> list[str]:
    """The statements of a SQLite script (a migration, or a named query of several)."""
    return [statement for statement, _ in guarded_statements(script)]


# A comment line ``-- only when :param`` right before a statement: see guarded_statements.
_GUARD = re.compile(r"^--\s*only when\s*:(\w+)\s*$")


def guarded_statements(script: str) -> list[tuple[str, str | None]]:
    """The statements of a SQLite script, each with the parameter that guards it.

    Split on complete statements, not on every ';': a trigger body holds several. Whole
    comment lines are dropped. A statement after ``-- only when :p`` does nothing unless
    ``p`` is set, so a caller may skip it when ``p`` is None, False, 0 or empty (running
    it would never be wrong, only slower: each statement costs a call into SQLite even
    when its WHERE is false at once). A query's last statement, its result, runs
    whatever its guard.
    """
    statements: list[tuple[str, str | None]] = []
    buf = ""
    guard: str | None = None
    for line in script.splitlines():
        if line.strip().startswith("--"):
            match = _GUARD.match(line.strip())
            if match is not None and not buf.strip():
                guard = match.group(1)
            continue
        buf += line + "\n"
        if sqlite3.complete_statement(buf):
            if buf.strip().rstrip(";").strip():
                statements.append((buf.strip(), guard))
            buf, guard = "", None
    if buf.strip():
        statements.append((buf.strip(), guard))
    return statements
