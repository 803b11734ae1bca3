"""Output for people and for scripts.

A read command prints JSON with ``--json``. Otherwise, on a terminal, it prints a
:mod:`rich` table; piped or redirected it prints the plain lines it always printed (one
record a line, stable for ``grep``/``cut`` and pinned by the tests). Long operations show
a progress bar on stderr when stderr is a terminal and ``--json`` is not given.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text


def tty() -> bool:
    """Whether stdout is a terminal (a person reads it)."""
    return sys.stdout.isatty()


def console(*, stderr: bool = False) -> Console:
    # highlight=False: ids and numbers are data, not something to colour by guesswork.
    return Console(stderr=stderr, highlight=False)


def print_json(value: Any) -> None:
    # default=str: a value JSON has no type for prints as its text, rather than failing
    # a command whose work is already done.
    print(json.dumps(value, indent=2, default=str))


def clip(text: str, limit: int = 160) -> str:
    """``text`` cut to ``limit`` characters, marked with an ellipsis (``--json`` has it all)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table(
    title: str | None,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    show_header: bool = True,
) -> Table:
    # Text, not str: a str given to rich is markup, and titles, headers and cells carry
    # stored data (a payload's "[/x]" would raise MarkupError, "[link=...]" make a link).
    t = Table(
        title=None if title is None else Text(title),
        title_justify="left",
        header_style="bold",
        show_header=show_header,
    )
    for name in columns:
        t.add_column(Text(name), overflow="fold")
    for row in rows:
        t.add_row(*(Text("-" if v is None else str(v)) for v in row))
    return t


def print_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    console().print(table(title, columns, rows))


@contextmanager
def progress(
    description: str, *, total: int | None = None, quiet: bool = False
) -> Iterator[Callable[..., None]]:
    """A function that advances a progress bar by ``n`` (and sets its ``total=`` when
    given); a bar only on a terminal's stderr and not when ``quiet`` (``--json``):
    elsewhere the function does nothing."""
    # stderr, and only a terminal's: a bar in a pipe or a log file would be noise between
    # the lines scripts read from stdout.
    if quiet or not sys.stderr.isatty():
        yield lambda n, total=None: None
        return
    columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    else:
        columns += [TextColumn("{task.completed} done")]
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)

        def advance(n: int, total: int | None = None) -> None:
            if total is not None:
                bar.update(task, total=total)
            bar.advance(task, n)

        yield advance
