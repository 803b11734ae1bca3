"""The dashboard's ``/metrics`` in Prometheus' text format, read from the store per scrape.

Gauges (their values are the store's at scrape time, so any number of dashboards, or
none, may run): ``swf_queue_depth{type,kind,state}`` (state ``ready``, ``leased``,
``later``), ``swf_dead_letters{state}`` (``total``, ``waiting``: not redriven),
``swf_instances{status}`` and ``swf_worker_leases{worker}``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

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


def scrape(reads: Overview | None) -> bytes:
    """One scrape: the store's counts in the text exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(reads))
    return generate_latest(registry)
