"""HeadWatcher: wakers are called once the head is past the head they saw, never before."""

from __future__ import annotations

import threading
from typing import Any, cast

from statemachine_wf.adapters.ethereum.errors import RpcUnavailable
from statemachine_wf.adapters.ethereum.heads import HeadWatcher


class Node:
    """A head number the test moves; a read can be made to fail once."""

    def __init__(self) -> None:
        self.head = 10
        self.reads = 0
        self.fail_next = False
        self.read = threading.Event()

    def block_number(self) -> int:
        self.reads += 1
        self.read.set()
        if self.fail_next:
            self.fail_next = False
            raise RpcUnavailable("node away")
        return self.head


def _watcher(node: Node) -> HeadWatcher:
    return HeadWatcher(cast(Any, node), interval=0.01)


def _settle(node: Node, reads: int = 3) -> None:
    """Let the watcher ask a few more times."""
    for _ in range(reads):
        node.read.clear()
        assert node.read.wait(5)


def test_a_waker_is_called_once_when_the_head_moves_past_what_it_saw() -> None:
    node = Node()
    watcher = _watcher(node)
    woken = threading.Event()
    calls: list[int] = []

    def wake() -> None:
        calls.append(node.head)
        woken.set()

    watcher.after(10, wake)
    _settle(node)
    assert calls == []  # the head is still 10: nothing to look at yet
    assert watcher.waiting == 1
    watcher.after(10**9, lambda: None)  # somebody still waits: the watcher keeps asking
    node.head = 11
    assert woken.wait(5)
    _settle(node)
    assert calls == [11]  # once
    assert watcher.waiting == 1  # only the other one
    watcher.close()


def test_a_head_already_past_wakes_at_the_next_question() -> None:
    node = Node()
    node.head = 12
    watcher = _watcher(node)
    woken = threading.Event()
    watcher.after(11, woken.set)  # a block came between the caller's look and now
    assert woken.wait(5)
    watcher.close()


def test_a_node_that_cannot_be_asked_delays_but_does_not_stop_the_watcher() -> None:
    node = Node()
    node.fail_next = True
    watcher = _watcher(node)
    woken = threading.Event()
    node.head = 11
    watcher.after(10, woken.set)
    assert woken.wait(5)
    watcher.close()


def test_it_asks_nothing_while_nobody_waits_and_close_drops_the_waiters() -> None:
    node = Node()
    watcher = _watcher(node)
    assert node.reads == 0  # no thread before the first waiter
    woken = threading.Event()
    watcher.after(10, woken.set)
    node.head = 11
    assert woken.wait(5)
    threading.Event().wait(0.1)  # at most the question in flight when the last waker left
    before = node.reads
    threading.Event().wait(0.2)
    assert node.reads == before  # asleep
    watcher.after(11, woken.set)
    watcher.close()
    assert watcher.waiting == 0
    watcher.after(11, woken.set)  # after close: ignored
    assert watcher.waiting == 0
