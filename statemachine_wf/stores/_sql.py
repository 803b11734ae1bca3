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
    return [statement for statement, _, _ in guarded_statements(script)]


# Comment lines right before a statement: ``-- only when :param`` guards it, ``-- sets
# :name`` makes it a probe (see guarded_statements).
_GUARD = re.compile(r"^--\s*only when\s*:(\w+)\s*$")
_SETS = re.compile(r"^--\s*sets\s*:(\w+)\s*$")


def guarded_statements(script: str) -> list[tuple[str, str | None, str | None]]:
    """The statements of a SQLite script, each with the parameter that guards it and the
    one it sets.

    Split on complete statements, not on every ';': a trigger body holds several. Whole
    comment lines are dropped. A statement after ``-- only when :p`` does nothing unless
    ``p`` is set, so a caller may skip it when ``p`` is None, False, 0 or empty (running
    it would never be wrong, only slower: each statement costs a call into SQLite even
    when its WHERE is false at once). A query's last statement, its result, runs
    whatever its guard. A statement after ``-- sets :p`` is a probe: its one value is
    ``p`` for the statements after it (a guard of theirs, most often), read in the
    script's own transaction, so under the writer lock it stays true until they run.
    """
    statements: list[tuple[str, str | None, str | None]] = []
    buf = ""
    guard: str | None = None
    sets: str | None = None
    for line in script.splitlines():
        if line.strip().startswith("--"):
            if not buf.strip():
                if (match := _GUARD.match(line.strip())) is not None:
                    guard = match.group(1)
                elif (match := _SETS.match(line.strip())) is not None:
                    sets = match.group(1)
            continue
        buf += line + "\n"
        if sqlite3.complete_statement(buf):
            if buf.strip().rstrip(";").strip():
                statements.append((buf.strip(), guard, sets))
            buf, guard, sets = "", None, None
    if buf.strip():
        statements.append((buf.strip(), guard, sets))
    return statements
