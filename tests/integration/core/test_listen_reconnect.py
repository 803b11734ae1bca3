"""PostgreSQL: a reconnect of the store's LISTEN connection wakes every worker.

The notifications sent while the LISTEN connection is down are lost with it, so the
store's watch wakes everyone on the loss and once it listens again. A worker that was
awake at that moment (between its claim and its sleep) must look again at its next wait
too, or it sleeps through the outage's work until its safety poll (``idle_poll``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest

from statemachine_wf.stores.postgres import PostgresStore
from tests.plugins.stores import listen_pids as plugged_listen_pids

pytestmark = pytest.mark.postgres


def _until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_worker_awake_during_a_reconnect_does_not_sleep_through_it(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    admin = psycopg.connect(pg_dsn, autocommit=True)

    def listen_pids() -> list[int]:
        return plugged_listen_pids(admin, pg_store.channel)

    awake, go = threading.Event(), threading.Event()
    waits: list[tuple[bool, float]] = []

    def worker() -> None:
        assert pg_store.wait_for_work(60)  # a thread's first wait: at once, the watch up
        awake.set()
        go.wait(60)  # busy: between a claim and its next sleep
        began = time.monotonic()
        waits.append((pg_store.wait_for_work(60), time.monotonic() - began))

    thread = threading.Thread(target=worker)
    try:
        thread.start()
        assert awake.wait(30)
        _until(lambda: len(listen_pids()) == 1)
        (old,) = listen_pids()
        admin.execute("SELECT pg_terminate_backend(%s)", (old,))
        _until(lambda: listen_pids() not in ([], [old]))  # listening again
        go.set()
        thread.join(90)
        assert not thread.is_alive()
        [(woken, slept)] = waits
        assert woken is True
        assert slept < 30  # at once, not after the 60 s timeout
    finally:
        go.set()
        admin.close()
