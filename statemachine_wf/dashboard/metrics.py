"""The dashboard's ``/metrics`` in Prometheus' text format, read from the store per scrape.

Gauges (their values are the store's at scrape time, so any number of dashboards, or
none, may run): ``swf_queue_depth{type,kind,state}`` (state ``ready``, ``leased``,
``later``), ``swf_dead_letters{state}`` (``total``, ``waiting``: not redriven),
``swf_instances{status}`` and ``swf_worker_leases{worker}``; and per held signer slot
(:class:`SignerCollector`) ``swf_signer_slot_held_seconds{key}``,
``swf_signer_slot_waiting{key}``, ``swf_signer_slot_wait_seconds{key}`` (the oldest
waiter's wait) and ``swf_signer_tx_pending_age_seconds{key}``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..client.signers import signer_queues
from ..core.store import Store
from .reads import Overview

CONTENT_TYPE = CONTENT_TYPE_LATEST


class StoreCollector(Collector):
    """Reads the counts from the store each time it is collected."""

    def __init__(self, reads: Overview | None) -> None:
        self.reads = reads

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.reads is None:
            return
        depth = GaugeMetricFamily(
            "swf_queue_depth", "Tasks by type, kind and state", labels=["type", "kind", "state"]
        )
        for row in self.reads.queue_depth():
            for state in ("ready", "leased", "later"):
                depth.add_metric([row["type"], row["kind"], state], row[state])
        yield depth
        letters = GaugeMetricFamily("swf_dead_letters", "Dead letters", labels=["state"])
        for state, n in self.reads.dead_letter_counts().items():
            letters.add_metric([state], n)
        yield letters
        instances = GaugeMetricFamily("swf_instances", "Instances by status", labels=["status"])
        for status, n in sorted(self.reads.status_counts().items()):
            instances.add_metric([status], n)
        yield instances
        leases = GaugeMetricFamily("swf_worker_leases", "Leases held per worker", labels=["worker"])
        for w in self.reads.workers():
            leases.add_metric([w["worker"]], w["leases"])
        yield leases


class SignerCollector(Collector):
    """Each held signer slot, read from the store per scrape: how long its holder has held
    it, how many wait and how long the oldest of them has waited, and the age of the
    holder's in-flight transaction."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        held = GaugeMetricFamily(
            "swf_signer_slot_held_seconds", "Seconds the slot's holder has held it", labels=["key"]
        )
        waiting = GaugeMetricFamily(
            "swf_signer_slot_waiting", "Instances waiting for the slot", labels=["key"]
        )
        wait = GaugeMetricFamily(
            "swf_signer_slot_wait_seconds",
            "Seconds the slot's oldest waiter has waited for it",
            labels=["key"],
        )
        age = GaugeMetricFamily(
            "swf_signer_tx_pending_age_seconds",
            "Seconds since the holder's pending transaction was broadcast",
            labels=["key"],
        )
        for q in signer_queues(self.store):
            held.add_metric([q.key], max(0.0, q.now - q.held_since))
            waiting.add_metric([q.key], len(q.waiting))
            if q.longest_wait is not None:
                wait.add_metric([q.key], q.longest_wait)
            if q.pending_age is not None:
                age.add_metric([q.key], q.pending_age)
        yield held
        yield waiting
        yield wait
        yield age


def scrape(reads: Overview | None, store: Store | None = None) -> bytes:
    """One scrape: the store's counts (and its signer slots) in the text exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(reads))
    if store is not None:
        registry.register(SignerCollector(store))
    return generate_latest(registry)
