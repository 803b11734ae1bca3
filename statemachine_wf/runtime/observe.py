"""Instrumentation of the runtime: log context, traces and the worker's metrics.

Three things, each cheap when unused:

* **Log context.** While a step attempt or a DAG node runs, every log record carries
  ``instance_id``, ``type``, ``step`` and ``attempt`` (a :class:`contextvars.ContextVar`
  read by :class:`ContextFilter`, which this module attaches to the runtime's loggers);
  :class:`JsonFormatter` writes them as one JSON object a line (``--log-format json``).
* **Traces** (OpenTelemetry, through ``opentelemetry-api`` only; without it, or without
  an SDK configured, nothing is recorded): one span per step attempt and per DAG node
  run, with the instance id, type, step and attempt. :func:`trace_context` captures the
  caller's context when an instance is started (the client stores it with the instance,
  ``wf_instances.trace_context``), and each span of the run is a child of it: a run
  continues its starter's trace in whatever process executes it.
* **Metrics** (``prometheus_client``, only when a :class:`WorkerMetrics` is given to the
  runner): steps started, completed, failed, retried and stalled by type and step; lease
  takeovers and leases lost; claim latency, start to first step and timer lateness as
  histograms. The store-read gauges (queue depth, dead letters, signer slots) are the
  dashboard's collector, registered beside these by ``statemachine-wf worker
  --metrics-port``.

The hooks in the runner, the driver and the DAG executor are one line each:
:meth:`Observer.step` / :meth:`Observer.node` around an attempt, :func:`mark` for its
outcome, :meth:`Observer.wrap_store` for the claims.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ..definition.events import Status
from ..definition.redact import redact_text
from ..errors import Waiting

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from ..core.store import Claim, Commit, InstanceRecord, Store
    from ..core.waits import SignalRecord

try:  # the API is optional: without it tracing is off
    from opentelemetry import trace as otel_trace
    from opentelemetry.propagate import extract as otel_extract
    from opentelemetry.propagate import inject as otel_inject
except ImportError:  # pragma: no cover - exercised only without the extra
    otel_trace = None  # type: ignore[assignment]

LOG_FIELDS = ("instance_id", "type", "step", "attempt")
"""What every runtime log record carries (None outside a step or node)."""

RUNTIME_LOGGERS = (
    "statemachine_wf.runner",
    "statemachine_wf.dag",
    "statemachine_wf.sqlite",
    "statemachine_wf.postgres",
)


# -- log context ----------------------------------------------------------------------
@dataclass(slots=True)
class Attempt:
    """One step attempt or DAG node run being observed: its log fields and outcome."""

    instance_id: str
    type: str
    step: str | None
    attempt: int | None
    kind: str = "machine"
    outcome: str = ""


_current: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar(
    "swf_attempt", default=None
)


def current() -> Attempt | None:
    """The attempt running in this context, if any."""
    return _current.get()


def enter_claim(claim: Claim) -> contextvars.Token[Attempt | None]:
    """The log context of a whole claim (begin, reconcile, hand-back, quarantine): its
    instance, type, task node and attempt; a step attempt inside it sets its own. Give
    the token back to :func:`leave`."""
    inst, task = claim.instance, claim.task
    step = task.slot if inst.kind == "dag" else (task.node or inst.step)
    return _current.set(Attempt(inst.id, inst.type, step, task.attempt or None, kind=inst.kind))


def leave(token: contextvars.Token[Attempt | None]) -> None:
    _current.reset(token)


def mark(outcome: str) -> None:
    """Record the outcome of the current attempt (``completed``, ``failed``, ``retried``,
    ``stalled``, ``waiting``, ``parked``); a no-op outside one."""
    a = _current.get()
    if a is not None:
        a.outcome = outcome


def failure_outcome(status: Status, cls: type[BaseException]) -> str:
    """What a step's failure, once committed, means: ``failed`` (FAILED), ``stalled``
    (STALLED), ``waiting`` (a lock or a snooze: not a failure) or ``retried``."""
    if status == Status.FAILED:
        return "failed"
    if status == Status.STALLED:
        return "stalled"
    return "waiting" if issubclass(cls, Waiting) else "retried"


class ContextFilter(logging.Filter):
    """Sets ``instance_id``, ``type``, ``step`` and ``attempt`` on every record it sees
    (None outside a step); a record that already has them keeps its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        a = _current.get()
        for name in LOG_FIELDS:
            if not hasattr(record, name):
                setattr(record, name, None if a is None else getattr(a, name))
        return True


_FILTER = ContextFilter()


def install_log_context(*names: str) -> None:
    """Attach the context filter to the named loggers (default: the runtime's). Idempotent."""
    for name in names or RUNTIME_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


install_log_context()


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the four context fields,
    and the exception if any; URLs and their secrets redacted."""

    def format(self, record: logging.LogRecord) -> str:
        _FILTER.filter(record)  # records of other loggers get the fields too
        out: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname,
            "logger": record.name,
            "message": redact_text(record.getMessage()),
        }
        for name in LOG_FIELDS:
            out[name] = getattr(record, name, None)
        if record.exc_info:
            out["exc"] = redact_text("".join(traceback.format_exception(*record.exc_info)))
        return json.dumps(out, default=str)


# -- traces -----------------------------------------------------------------------------
def trace_context() -> str | None:
    """The caller's trace context (W3C ``traceparent``, ``tracestate``) as JSON, or None
    when there is no recording span (or no OpenTelemetry)."""
    if otel_trace is None:
        return None
    if not otel_trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    otel_inject(carrier)
    return json.dumps(carrier, sort_keys=True) if carrier else None


def _parent(stored: str | None) -> Any:
    if stored is None or otel_trace is None:
        return None
    try:
        carrier = json.loads(stored)
    except ValueError:
        return None
    return otel_extract(carrier) if isinstance(carrier, dict) else None


_tracer_cache: tuple[object, Any] = (None, None)
_provider_asked = False


def _tracer() -> Any:
    """The package's tracer, or None while no SDK is configured (the API's proxy or
    no-op provider): then a step costs no span at all, not even a non-recording one.
    Looked up per attempt, so a provider set after the runner started is used."""
    global _tracer_cache, _provider_asked
    if otel_trace is None:
        return None
    # While no provider is set, the API's get_tracer_provider() looks in os.environ for
    # OTEL_PYTHON_TRACER_PROVIDER (a provider to load) on every call: 1.2 us an attempt.
    # Asked once; after that, while the API's global still holds none, there is none.
    # (An API without that global is asked every time.)
    if _provider_asked and getattr(otel_trace, "_TRACER_PROVIDER", True) is None:
        return None
    _provider_asked = True
    provider = otel_trace.get_tracer_provider()
    if isinstance(provider, otel_trace.ProxyTracerProvider | otel_trace.NoOpTracerProvider):
        return None
    cached, tracer = _tracer_cache
    if cached is not provider:
        tracer = provider.get_tracer("statemachine_wf")
        _tracer_cache = (provider, tracer)
    return tracer


_UNTRACED = contextlib.nullcontext()
"""What :func:`_span` returns while no SDK is configured (stateless, so shared)."""


def _span(name: str, a: Attempt, stored: str | None) -> contextlib.AbstractContextManager[None]:
    tracer = _tracer()
    return _UNTRACED if tracer is None else _traced(tracer, name, a, stored)


@contextlib.contextmanager
def _traced(tracer: Any, name: str, a: Attempt, stored: str | None) -> Iterator[None]:
    attrs: dict[str, Any] = {"swf.instance_id": a.instance_id, "swf.type": a.type}
    if a.step is not None:
        attrs["swf.step"] = a.step
    if a.attempt is not None:
        attrs["swf.attempt"] = a.attempt
    with tracer.start_as_current_span(
        name, context=_parent(stored), attributes=attrs, record_exception=True
    ) as span:
        yield
        if a.outcome:
            span.set_attribute("swf.outcome", a.outcome)
            if a.outcome in ("failed", "stalled", "retried"):
                span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, a.outcome))


# -- metrics ----------------------------------------------------------------------------
_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class WorkerMetrics:
    """The worker's Prometheus metrics, in their own registry (``registry``).

    Counters ``swf_steps_{started,completed,failed,retried,stalled}_total{type,step}``
    (a DAG node counts as a step: its node id), ``swf_lease_takeovers_total{type}`` (a
    claim of a task whose last attempt never finished: its holder died or lost the lease),
    ``swf_leases_lost_total``; histograms ``swf_claim_seconds{kind}``,
    ``swf_start_to_first_step_seconds{type}`` (creation to the first step's start) and
    ``swf_timer_lateness_seconds{type}`` (a timer's delivery after its due time).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        labels = ["type", "step"]
        self.started = Counter("swf_steps_started", "Step attempts started", labels, registry=r)
        self.outcomes = {
            name: Counter(f"swf_steps_{name}", f"Step attempts {name}", labels, registry=r)
            for name in ("completed", "failed", "retried", "stalled")
        }
        self.takeovers = Counter(
            "swf_lease_takeovers",
            "Claims of a task in doubt (its holder vanished)",
            ["type"],
            registry=r,
        )
        self.lost = Counter("swf_leases_lost", "Outcomes refused: the lease was lost", registry=r)
        self.claim = Histogram(
            "swf_claim_seconds", "Claim latency", ["kind"], buckets=_LATENCY_BUCKETS, registry=r
        )
        self.first_step = Histogram(
            "swf_start_to_first_step_seconds",
            "From an instance's creation to its first step's start",
            ["type"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.timer_lateness = Histogram(
            "swf_timer_lateness_seconds",
            "How late a timer was delivered after its due time",
            ["type"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )


class Observer:
    """The runtime's instrumentation: tracing always (a no-op without an SDK), metrics
    when ``metrics`` is given."""

    def __init__(self, metrics: WorkerMetrics | None = None) -> None:
        self.metrics = metrics

    @contextlib.contextmanager
    def step(
        self, record: InstanceRecord, step: str, attempt: int, attempts: Mapping[str, int]
    ) -> Iterator[Attempt]:
        """Around one step attempt (``attempts``: the run's per step, this one counted):
        log context, span, counters."""
        a = Attempt(record.id, record.type, step, attempt)
        m = self.metrics
        if m is not None:
            m.started.labels(record.type, step).inc()
            # ``attempts`` counts every step's attempts so far, this one included: a sum of
            # one is the run's first attempt, not merely a later step's first.
            if attempt == 1 and sum(attempts.values()) <= 1:
                m.first_step.labels(record.type).observe(max(0.0, time.time() - record.created_at))
        token = _current.set(a)
        try:
            with _span(f"step {step}", a, record.trace_context):
                yield a
        finally:
            _current.reset(token)
            if m is not None and a.outcome in m.outcomes:
                m.outcomes[a.outcome].labels(record.type, step).inc()

    @contextlib.contextmanager
    def node(self, claim: Claim) -> Iterator[Attempt]:
        """Around one DAG node run (its try: the task's attempt)."""
        inst, node = claim.instance, claim.task.slot
        a = Attempt(inst.id, inst.type, node, claim.task.attempt, kind="dag")
        m = self.metrics
        if m is not None:
            m.started.labels(inst.type, node).inc()
        token = _current.set(a)
        try:
            with _span(f"node {node}", a, inst.trace_context):
                yield a
        finally:
            _current.reset(token)
            if m is not None and a.outcome in m.outcomes:
                m.outcomes[a.outcome].labels(inst.type, node).inc()

    def delivered(self, record: InstanceRecord, signals: Sequence[SignalRecord]) -> None:
        """Timers just delivered: how late each was."""
        m = self.metrics
        if m is None:
            return
        now = time.time()
        for s in signals:
            if s.kind == "timer" and s.due_at <= now:
                m.timer_lateness.labels(record.type).observe(max(0.0, now - s.due_at))

    def lease_lost(self) -> None:
        if self.metrics is not None:
            self.metrics.lost.inc()

    def wrap_store(self, store: Store) -> Store:
        """``store`` with its claims timed and takeovers counted (itself without metrics)."""
        if self.metrics is None:
            return store
        return cast("Store", _MeteredStore(store, self.metrics))


class _MeteredStore:
    """A store whose claims are timed; everything else is passed through unchanged."""

    def __init__(self, store: Store, metrics: WorkerMetrics) -> None:
        self._store = store
        self._m = metrics

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _claimed(self, kind: str, started: float, claims: list[Claim]) -> list[Claim]:
        self._m.claim.labels(kind).observe(time.perf_counter() - started)
        for c in claims:
            if c.task.in_flight and not c.started:
                self._m.takeovers.labels(c.instance.type).inc()
        return claims

    def claim(self, **kwargs: Any) -> list[Claim]:
        t = time.perf_counter()
        return self._claimed("machine", t, self._store.claim(**kwargs))

    def apply_and_claim(self, commit: Commit, **kwargs: Any) -> tuple[int, list[Claim]]:
        t = time.perf_counter()  # the claim's time includes the commit it rides in
        version, claims = self._store.apply_and_claim(commit, **kwargs)
        return version, self._claimed("machine", t, claims)

    def dag_claim(self, **kwargs: Any) -> list[Claim]:
        t = time.perf_counter()
        return self._claimed("dag", t, self._store.dag_claim(**kwargs))

    def claim_instance(self, instance_id: str, **kwargs: Any) -> Claim | None:
        t = time.perf_counter()
        found = self._store.claim_instance(instance_id, **kwargs)
        self._claimed("startup", t, [] if found is None else [found])
        return found


NOOP = Observer()
"""Tracing only (a no-op without an OpenTelemetry SDK): the default of every runner."""
