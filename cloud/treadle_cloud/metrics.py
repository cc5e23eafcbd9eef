"""Observability in the cloud shape: the core's counters as CloudWatch EMF (Powertools Metrics),
the OpenTelemetry SDK when `OTEL_*` asks for traces, and JSON log lines on request.

Each handler's `__call__` is wrapped by `observed_invocation`: on the first invocation it installs
all three; after every invocation it writes the buffered metrics (one EMF document per dimension
set, into the function's log stream) and flushes buffered spans — Lambda freezes the
environment between invocations, so nothing may wait for a background timer.

Environment: `TREADLE_METRICS_NAMESPACE` (default `treadle`), `POWERTOOLS_SERVICE_NAME` (the
`service` dimension and log key, default `treadle`), `TREADLE_EMF=off` to write none; `OTEL_*`
as the sidecar reads them (docs/observability.md); `TREADLE_LOG_FORMAT=json`: treadle's records
in Powertools Logger's JSON, with run_id, step_no, tenant and the trace ids.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from treadle.telemetry import tracing
from treadle.telemetry.logs import RunContextFilter, log_format
from treadle.telemetry.metrics import Metrics, metrics, use_metrics

log = logging.getLogger("treadle.cloud.metrics")

R = TypeVar("R")


class EmfSink:
    """Measurements buffered per dimension set, written as EMF by `flush`."""

    def __init__(self, namespace: str, service: str) -> None:
        self.namespace = namespace
        self.service = service
        self._sets: dict[tuple[tuple[str, str], ...], EphemeralMetrics] = {}

    def add(self, name: str, value: float, unit: str, dimensions: dict[str, str]) -> None:
        key = tuple(sorted(dimensions.items()))
        m = self._sets.get(key)
        if m is None:
            m = self._sets[key] = EphemeralMetrics(namespace=self.namespace, service=self.service)
            for k, v in key:
                m.add_dimension(name=k, value=v)
        m.add_metric(name=name, unit=MetricUnit(unit), value=value)

    def flush(self) -> None:
        sets, self._sets = self._sets, {}
        for m in sets.values():
            m.flush_metrics()


class _Installed:
    emf: EmfSink | None = None
    provider: Any = None
    meters: Any = None
    log_handler: logging.Handler | None = None
    done = False


def install() -> None:
    """Once per execution environment: the EMF sink, the tracer provider, the log format."""
    if _Installed.done:
        return
    _Installed.done = True
    if os.environ.get("TREADLE_EMF", "on").strip().lower() != "off":
        sink = EmfSink(os.environ.get("TREADLE_METRICS_NAMESPACE") or "treadle",
                       os.environ.get("POWERTOOLS_SERVICE_NAME") or "treadle")
        emf_only = Metrics(prometheus=False)  # a Lambda serves no scrape: no Prometheus instruments
        emf_only.sinks.append(sink)
        use_metrics(emf_only)
        _Installed.emf = sink
    _Installed.provider = _tracer_provider()
    _Installed.meters = _meter_provider()
    if _Installed.meters is not None:  # the usage and cost counters (telemetry/metrics.py), flushed per invocation
        metrics().use_meter_provider(_Installed.meters)
    if log_format() == "json":
        _json_logs(os.environ.get("POWERTOOLS_SERVICE_NAME") or "treadle")


def _json_logs(service: str) -> None:
    """treadle's records as Powertools' structured JSON (level, location, message, timestamp,
    service) plus the run's fields and trace ids, on their own handler; they no longer also go
    through the Lambda runtime's plain-text root handler."""
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

    handler = logging.StreamHandler(sys.stdout)
    handler.addFilter(RunContextFilter())
    handler.setFormatter(LambdaPowertoolsFormatter(service=service))
    logger = logging.getLogger("treadle")
    logger.addHandler(handler)
    logger.propagate = False
    _Installed.log_handler = handler


def _tracer_provider() -> Any:
    """An SDK provider exporting over OTLP/HTTP when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set
    (e.g. the ADOT collector extension on localhost), else None (tracing off)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return None
    if not (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = os.environ.get("OTEL_SERVICE_NAME") or os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or "treadle"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracing.use_tracer_provider(provider)
    return provider


def _meter_provider() -> Any:
    """An SDK MeterProvider exporting over OTLP/HTTP when OTEL_EXPORTER_OTLP_(METRICS_)ENDPOINT is
    set and OTEL_METRICS_EXPORTER is not `none`, else None; exported at each invocation's flush."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if os.environ.get("OTEL_METRICS_EXPORTER", "otlp").strip().lower() == "none":
        return None
    if not (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")):
        return None
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    name = os.environ.get("OTEL_SERVICE_NAME") or os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or "treadle"
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=3_600_000)
    return MeterProvider(resource=Resource.create({"service.name": name}), metric_readers=[reader])


def flush() -> None:
    """After an invocation: the buffered EMF documents out, the buffered spans exported."""
    if _Installed.emf is not None:
        _Installed.emf.flush()
    if _Installed.provider is not None:
        try:
            _Installed.provider.force_flush(5000)
        except Exception as exc:  # never fail the invocation for telemetry
            log.warning("span flush failed: %s", exc)
    if _Installed.meters is not None:
        try:
            _Installed.meters.force_flush(5000)
        except Exception as exc:  # never fail the invocation for telemetry
            log.warning("metrics flush failed: %s", exc)


def uninstall() -> None:
    """Tests: undo `install` (the process's metrics and tracer provider back to the defaults)."""
    if _Installed.provider is not None:
        tracing.use_tracer_provider(None)
        _Installed.provider.shutdown()
    if _Installed.meters is not None:
        metrics().use_meter_provider(None)
        _Installed.meters.shutdown()
    if _Installed.emf is not None:
        use_metrics(None)
    if _Installed.log_handler is not None:
        logger = logging.getLogger("treadle")
        logger.removeHandler(_Installed.log_handler)
        logger.propagate = True
    _Installed.emf, _Installed.provider, _Installed.log_handler, _Installed.done = None, None, None, False
    _Installed.meters = None


def observed_invocation(call: Callable[..., R]) -> Callable[..., R]:
    """Decorates a handler's `__call__(self, event, context)`."""

    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        install()
        try:
            return call(*args, **kwargs)
        finally:
            flush()

    return wrapper
