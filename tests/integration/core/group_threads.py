"""Threads that commit at once through a store's group (stores/_group.py), grouped by the
test's choice rather than by luck: the first statement waits until every other thread
has queued behind it, so the next one carries them all."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest


def hold_first_statement(monkeypatch: pytest.MonkeyPatch, group: Any, threads: int) -> list[int]:
    """Wrap ``group``'s send; the sizes of the batches it sends, in order."""
    sent: list[int] = []
    send = group._send
    first = threading.Event()

    def counting(items: Sequence[Any]) -> Any:
        if not first.is_set():
            first.set()
            deadline = time.monotonic() + 10
            while len(group._queued) < threads - 1:
                assert time.monotonic() < deadline, "the threads never queued"
                time.sleep(0.001)
        sent.append(len(items))
        return send(items)

    monkeypatch.setattr(group, "_send", counting)
    return sent


def run_at_once(target: Callable[[Any], None], args: Sequence[Any]) -> list[BaseException]:
    """``target(a)`` for each of ``args``, each on its own thread, started together; what
    they raised."""
    errors: list[BaseException] = []
    go = threading.Barrier(len(args))

    def run(arg: Any) -> None:
        try:
            go.wait()
            target(arg)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(a,)) for a in args]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=60)
    return errors


def in_thread(fn: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    """Run ``fn`` in a thread of its own, started; the thread and what ``fn`` raised."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors
