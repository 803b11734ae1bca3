"""``worker --metrics-port``: the worker's metrics and the store's gauges over HTTP.

One registry: the runtime's :class:`~statemachine_wf.runtime.observe.WorkerMetrics`
(counters and histograms of what this worker did), the dashboard's store collector
(queue depth by type, dead letters, instances by status, leases per worker; read per
scrape) and the signer slots (the dashboard's :class:`SignerCollector`).
"""

from __future__ import annotations

from ..core.store import Store
from ..runtime.observe import WorkerMetrics


def worker_metrics(store: Store) -> WorkerMetrics:
    """The worker's metrics with the store-read gauges registered beside them."""
    from ..dashboard.metrics import SignerCollector, StoreCollector
    from ..dashboard.reads import overview

    metrics = WorkerMetrics()
    metrics.registry.register(StoreCollector(overview(store)))
    metrics.registry.register(SignerCollector(store))
    return metrics


def serve_metrics(store: Store, host: str, port: int) -> WorkerMetrics:
    """Start the metrics HTTP server (a daemon thread) and return the metrics it serves."""
    from prometheus_client import start_http_server

    metrics = worker_metrics(store)
    start_http_server(port, addr=host, registry=metrics.registry)
    return metrics
