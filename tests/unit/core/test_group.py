"""``stores._group.Group``: what threads submitting at once share, and whose outcome is
whose. No database: ``send`` here records its batches (the PostgreSQL statement is
tests/integration/core/test_group_commit.py)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence

import pytest

from statemachine_wf.stores._group import Group


def wait_for(ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not ready():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


class Sender:
    """A ``send`` that records its batches. The first batch is held until ``hold`` more
    submitters queue behind it, so what the next batches hold is the test's choice."""

    def __init__(
        self, outcome: Callable[[str], object] = str.upper, *, hold: int = 0, most: int = 32
    ) -> None:
        self.outcome = outcome
        self.hold = hold
        self.batches: list[list[str]] = []
        self.seen: set[str] = set()  # every item a send has been handed
        self.group: Group[str, object] = Group(self, most=most)

    def __call__(self, items: Sequence[str]) -> list[object]:
        self.seen.update(items)
        if not self.batches and self.hold:
            wait_for(lambda: len(self.group._queued) >= self.hold)
        self.batches.append(list(items))
        return [self.outcome(i) for i in items]

    def submit_all(self, items: list[tuple[str, str]]) -> dict[str, object]:
        """Submit each ``(key, item)`` from a thread of its own, one after the other (each
        queued or sent before the next starts); the outcomes, exceptions included."""
        out: dict[str, object] = {}

        def one(key: str, item: str) -> None:
            try:
                out[item] = self.group.submit(key, item)
            except BaseException as exc:
                out[item] = exc

        threads = []
        for key, item in items:
            t = threading.Thread(target=one, args=(key, item))
            t.start()
            threads.append(t)
            wait_for(functools.partial(self._entered, item, out))
        for t in threads:
            t.join(timeout=10)
        return out

    def _entered(self, item: str, out: dict[str, object]) -> bool:
        """Whether ``item`` is queued, being sent, or done."""
        return item in out or item in self.seen or any(e.item == item for e in self.group._queued)


def test_a_lone_item_is_sent_at_once_by_its_own_thread() -> None:
    sender = Sender()
    assert sender.group.submit("k", "a") == "A"
    assert sender.batches == [["a"]]


def test_items_queued_behind_a_send_go_together_in_the_next() -> None:
    sender = Sender(hold=4)
    out = sender.submit_all([(k, k) for k in "abcde"])
    assert out == {k: k.upper() for k in "abcde"}
    assert sender.batches == [["a"], ["b", "c", "d", "e"]]


def test_one_key_never_twice_in_a_batch_and_a_batch_holds_at_most_most() -> None:
    sender = Sender(hold=4, most=2)
    out = sender.submit_all([("0", "x"), ("1", "a"), ("1", "b"), ("2", "c"), ("3", "d")])
    assert out == {k: k.upper() for k in "xabcd"}
    assert sender.batches[:2] == [["x"], ["a", "c"]]  # b waits: its key is taken
    assert sender.batches[2:] == [["b", "d"]]


def test_each_item_gets_its_own_outcome() -> None:
    sender = Sender(lambda i: ValueError(i) if i == "b" else i, hold=2)
    out = sender.submit_all([("a", "a"), ("b", "b"), ("c", "c")])
    assert sender.batches == [["a"], ["b", "c"]]
    assert out["a"] == "a"
    assert out["c"] == "c"
    assert isinstance(out["b"], ValueError)


def test_a_send_that_raises_is_every_items_outcome() -> None:
    def broken(items: Sequence[str]) -> list[object]:
        raise OSError("down")

    with pytest.raises(OSError, match="down"):
        Group(broken).submit("k", "a")


def test_an_interrupted_sender_leaves_the_others_an_unknown_outcome() -> None:
    sender = Sender()

    def send(items: Sequence[str]) -> list[object]:
        if not sender.batches:
            sender.batches.append(list(items))
            sender.seen.update(items)
            wait_for(lambda: len(sender.group._queued) >= 2)
            return ["FIRST"]
        sender.seen.update(items)
        raise KeyboardInterrupt

    sender.group = Group(send, interrupted=lambda e: RuntimeError(f"unknown: {e!r}"))
    out = sender.submit_all([("1", "first"), ("2", "second"), ("3", "third")])
    assert out["first"] == "FIRST"
    # The second batch holds both: its sender raises the interrupt, and the other
    # submitter learns that its outcome is unknown.
    assert sorted(type(out[k]).__name__ for k in ("second", "third")) == [
        "KeyboardInterrupt",
        "RuntimeError",
    ]


def test_most_must_be_positive() -> None:
    with pytest.raises(ValueError, match="most"):
        Group(lambda items: list(items), most=0)


def test_many_threads_each_get_their_own_outcome_once() -> None:
    """A stress run: 16 threads, 200 items each over 8 keys; every item is sent once, in a
    batch with no key twice, and its submitter gets that item's outcome, nobody hangs."""
    batches: list[list[str]] = []
    lock = threading.Lock()

    def send(items: Sequence[str]) -> list[object]:
        with lock:
            batches.append(list(items))
        time.sleep(0.0002)  # the statement's round trip, in which others queue
        return [i.upper() for i in items]

    group: Group[str, object] = Group(send, most=5)
    wrong: list[tuple[str, object]] = []

    def run(t: int) -> None:
        for n in range(200):
            item = f"t{t}-{n}"
            got = group.submit(str((t + n) % 8), item)
            if got != item.upper():
                wrong.append((item, got))

    threads = [threading.Thread(target=run, args=(t,)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a submitter hung"
    assert wrong == []
    sent = [i for b in batches for i in b]
    assert sorted(sent) == sorted(f"t{t}-{n}" for t in range(16) for n in range(200))
    assert all(len(b) <= 5 for b in batches)
    assert all(
        len({(int(i[1:].split("-")[0]) + int(i.split("-")[1])) % 8 for i in b}) == len(b)
        for b in batches
    )
    assert any(len(b) > 1 for b in batches)
