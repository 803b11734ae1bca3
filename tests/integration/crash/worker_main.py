"""A runner process for the crash tests, with SIGKILL injected at chosen points.

    python worker_main.py --url URL [--schema S] --ledger SPEC --worker-id ID
        [--lease 1.0] [--concurrency 2] [--kill STORE_POINT | --chaos ACTION_POINT]

``--kill`` wraps the real store of this process (SQLite or Postgres) and kills the
process with SIGKILL at the k-th matching call:

* ``claim:before:k``    before the k-th ``claim`` call (nothing of it committed);
* ``claim:after:k``     right after the k-th ``claim`` that leased work (intent committed);
* ``complete:before:k`` before the k-th ``apply`` carrying a STEP_COMPLETED (the action
  returned, its completion is not committed);
* ``complete:after:k``  right after that commit;
* ``start:kept:k``     after the k-th start this process made and leased to one of its own
  idle workers (``--produce``; PostgreSQL): committed (its first step started), no
  other process told, the worker not yet woken;
* ``offer:heard:k``   right after this process heard the k-th start another process
  leased to one of its idle workers (PostgreSQL) and handed it to them;
* a ``:stop`` suffix sends SIGSTOP instead (see :class:`KillSwitch`).

``--produce n`` also starts ``n`` Ledgered instances from this process, one every
``--produce-every`` seconds, once its runner runs.

``--chaos after_save:k`` / ``after_effect:k`` makes the action kill its own process in
the middle (see :class:`workflows.Chaos`); ``--heartbeat-outage s`` makes heartbeats
fail for ``s`` seconds after the first claim. The process prints ``READY <worker_id>`` once
its store is open and then serves until SIGTERM (a graceful stop, exit status 0).
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from statemachine_wf.client.machine import Client
from statemachine_wf.core.store import Claim, Commit
from statemachine_wf.definition.events import Ev
from statemachine_wf.errors import StoreError
from statemachine_wf.runtime.runner import Runner, RunnerOptions
from tests.integration.crash.workflows import Chaos, Ledgered, open_ledger


class KillSwitch:
    """Counts matching store calls and signals this process at the chosen one.

    ``op:when:k`` sends SIGKILL; ``op:when:k:stop`` sends SIGSTOP instead, freezing the
    whole process (heartbeats included) until the test sends SIGCONT: a zombie runner.
    """

    def __init__(self, spec: str | None) -> None:
        self.op = self.when = None
        self.at = 0
        self.signal = signal.SIGKILL
        if spec:
            parts = spec.split(":")
            self.op, self.when, self.at = parts[0], parts[1], int(parts[2])
            if parts[3:] == ["stop"]:
                self.signal = signal.SIGSTOP
        self._seen = 0
        self._lock = threading.Lock()

    def hit(
        self, op: str, when: str, quiet: Callable[[], AbstractContextManager[None]] = nullcontext
    ) -> None:
        """Count one ``op`` call at ``when``; die if it is the chosen one. A SIGSTOP is sent
        inside ``quiet()``: the store's other threads (the heartbeat's write) must not be
        frozen holding what every other process needs to start (SQLite's write lock)."""
        if (op, when) != (self.op, self.when):
            return
        with self._lock:
            self._seen += 1
            if self._seen == self.at:
                # Thread-directed, so this very thread stops or dies before its next line;
                # a process-directed SIGSTOP was seen to let it run on into the commit.
                with quiet() if self.signal == signal.SIGSTOP else nullcontext():
                    signal.pthread_kill(threading.get_ident(), self.signal)


def killing_store(base: type[Any], switch: KillSwitch, outage: float = 0.0) -> type[Any]:
    """A subclass of the real store class whose claim/apply die where ``switch`` says.

    With ``outage``, every heartbeat fails for that many seconds after the first claim
    (as when the database is briefly unreachable for that one call), so leases lapse.
    """
    outage_until: list[float] = []

    class KillingStore(base):  # type: ignore[misc]
        @contextmanager
        def _no_write(self) -> Iterator[None]:
            # SQLite: this process's writer lock held, with no group commit open, so no
            # thread of the frozen process holds the file's write lock (a heir starting
            # up writes, and waited for the thaw that only comes once it has started).
            writer = getattr(self, "_writer", None)
            if writer is None:  # PostgreSQL: nothing of the kind
                yield
                return
            while True:
                writer.acquire()
                if self._group is None:
                    break
                writer.release()
                time.sleep(0.001)
            try:
                yield
            finally:
                writer.release()

        def heartbeat(self, **kwargs: Any) -> int:
            if outage_until and time.monotonic() < outage_until[0]:
                raise StoreError("injected heartbeat outage")
            n: int = super().heartbeat(**kwargs)
            return n

        def claim(self, **kwargs: Any) -> list[Claim]:
            switch.hit("claim", "before", self._no_write)
            claims: list[Claim] = super().claim(**kwargs)
            if claims:
                if outage and not outage_until:
                    outage_until.append(time.monotonic() + outage)
                switch.hit("claim", "after", self._no_write)
            return claims

        def apply(self, commit: Commit) -> int:
            completes = any(e.event_type == Ev.STEP_COMPLETED for e in commit.decision.events)
            if completes:
                switch.hit("complete", "before", self._no_write)
            version: int = super().apply(commit)
            if completes:
                switch.hit("complete", "after", self._no_write)
            return version

        def apply_and_claim(self, commit: Commit, **kwargs: Any) -> tuple[int, list[Claim]]:
            # A finish and the next claim in one commit: the points of both, in their order.
            completes = any(e.event_type == Ev.STEP_COMPLETED for e in commit.decision.events)
            if completes:
                switch.hit("complete", "before", self._no_write)
            switch.hit("claim", "before", self._no_write)
            done: tuple[int, list[Claim]] = super().apply_and_claim(commit, **kwargs)
            if completes:
                switch.hit("complete", "after", self._no_write)
            if done[1]:
                switch.hit("claim", "after", self._no_write)
            return done

    return KillingStore


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--schema")
    p.add_argument("--ledger", required=True)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--lease", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--pool-size", type=int, default=4)
    p.add_argument("--kill")
    p.add_argument("--chaos")
    p.add_argument("--heartbeat-outage", type=float, default=0.0)
    p.add_argument("--produce", type=int, default=0)
    p.add_argument("--produce-every", type=float, default=0.02)
    args = p.parse_args()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a hung child can be asked
    logging.basicConfig(
        level=logging.WARNING, format=f"%(asctime)s {args.worker_id} %(name)s %(message)s"
    )

    switch = KillSwitch(args.kill)
    if args.url.startswith("sqlite:///"):
        from statemachine_wf.stores.sqlite import SQLiteStore

        store = killing_store(SQLiteStore, switch, args.heartbeat_outage)(
            args.url.removeprefix("sqlite:///")
        )
    else:
        from statemachine_wf.stores.postgres import PostgresStore

        store = killing_store(PostgresStore, switch, args.heartbeat_outage)(
            args.url, schema=args.schema, pool_size=args.pool_size
        )
    store.migrate()
    wakeup = getattr(store, "_wakeup", None)
    if wakeup is not None and hasattr(wakeup, "keep"):
        keep = wakeup.keep

        def killing_keep(sleeper: Any, type_: str, *, made: bool = True, claim: Any = None) -> None:
            if claim is not None:
                switch.hit("start", "kept")
            keep(sleeper, type_, made=made, claim=claim)

        wakeup.keep = killing_keep
    offers = getattr(store, "_offers", None)
    if offers is not None:
        received = offers.received

        def killing_received(payload: str) -> None:
            received(payload)
            if not payload.startswith(("retired ", "closed")):  # not a stop's marker
                switch.hit("offer", "heard")

        offers.received = killing_received
    ledger = open_ledger(args.ledger)
    runner = Runner(
        store,
        [Ledgered],
        options=RunnerOptions(
            concurrency=args.concurrency,
            lease=args.lease,
            worker_id=args.worker_id,
            idle_poll=0.5,
        ),
        dependencies={"ledger": ledger, "chaos": Chaos(args.chaos)},
    )
    print(f"READY {args.worker_id}", flush=True)

    def produce() -> None:
        client = Client(store)
        time.sleep(0.5)  # the runner's workers asleep
        for i in range(args.produce):
            client.start(Ledgered, {"n": i})
            time.sleep(args.produce_every)

    if args.produce:
        threading.Thread(target=produce, name="producer", daemon=True).start()
    try:
        runner.run()  # until SIGTERM
    finally:
        ledger.close()
        store.close()


if __name__ == "__main__":
    main()
