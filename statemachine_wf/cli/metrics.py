"""``worker --metrics-port``: the worker's metrics and the store's gauges over HTTP.

One registry: the runtime's :class:`~statemachine_wf.runtime.observe.WorkerMetrics`
(counters and histograms of what this worker did), the dashboard's store collector
(queue depth by type, dead letters, instances by status, leases per worker; read per
scrape) and the signer slots (:class:`SignerCollector`).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..client.signers import signer_queues
from ..core.store import Store
from ..runtime.observe import WorkerMetrics


def worker_metrics(store: Store) -> WorkerMetrics:
    """The worker's metrics with the store-read gauges registered beside them."""
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector

    from ..dashboard.metrics import StoreCollector
    from ..dashboard.reads import overview

    class SignerCollector(Collector):
        """Each held signer slot, read from the store per scrape: how long its holder
        has held it, how many wait and how long the oldest of them has waited, and the
        age of the holder's in-flight transaction."""

        def collect(self) -> Iterator[GaugeMetricFamily]:
            held = GaugeMetricFamily(
                "swf_signer_slot_held_seconds",
                "Seconds the slot's holder has held it",
                labels=["key"],
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
            for q in signer_queues(store):
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

    metrics = WorkerMetrics()
    metrics.registry.register(StoreCollector(overview(store)))
    metrics.registry.register(SignerCollector())
    return metrics


def serve_metrics(store: Store, host: str, port: int) -> WorkerMetrics:
    """Start the metrics HTTP server (a daemon thread) and return the metrics it serves."""
    from prometheus_client import start_http_server

    metrics = worker_metrics(store)
    start_http_server(port, addr=host, registry=metrics.registry)
    return metrics
