"""The sidecar's OpenTelemetry SDK: installed when the standard `OTEL_*` variables ask for traces
(`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_TRACES_EXPORTER`
= `otlp` | `console`), off otherwise and with `OTEL_SDK_DISABLED=true`. Spans leave in batches
(`OTEL_BSP_*`), the resource from `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES`.

Metrics likewise (`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, or
`OTEL_METRICS_EXPORTER` = `otlp` | `console`): the usage and cost counters (telemetry/metrics.py),
exported every `OTEL_METRIC_EXPORT_INTERVAL` ms (60 s by default) and at shutdown."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

from treadle.errors import ConfigError
from treadle.telemetry import tracing
from treadle.telemetry.metrics import metrics

EXPORTERS = ("otlp", "console", "none")


def traces_exporter(env: Mapping[str, str] | None = None, signal: str = "traces") -> str:
    """`otlp`, `console` or `none` from the environment, for `signal` (traces or metrics)."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return "none"
    chosen = env.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower()
    if chosen:
        if chosen not in EXPORTERS:
            raise ConfigError(f"OTEL_{signal.upper()}_EXPORTER={chosen!r}: treadle exports {signal} with one of "
                              f"{EXPORTERS}")
        return chosen
    endpoints = ("OTEL_EXPORTER_OTLP_ENDPOINT", f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    return "otlp" if any(env.get(k) for k in endpoints) else "none"


def meter_provider(service_name: str = "treadle") -> Any | None:
    """An SDK MeterProvider exporting as the environment asks, or None (metrics off)."""
    kind = traces_exporter(signal="metrics")
    if kind == "none":
        return None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricExporter, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    exporter: MetricExporter
    if kind == "console":
        exporter = ConsoleMetricExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter()
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service_name})
    return MeterProvider(resource=resource, metric_readers=[PeriodicExportingMetricReader(exporter)])


class Tracing:
    """The SDK tracer provider for the life of the app (None when tracing is off)."""

    def __init__(self, service_name: str = "treadle") -> None:
        self.provider = None
        self.meters = meter_provider(service_name)
        if self.meters is not None:
            metrics().use_meter_provider(self.meters)
        kind = traces_exporter()
        if kind == "none":
            return
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

        exporter: SpanExporter
        if kind == "console":
            exporter = ConsoleSpanExporter()
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        # OTEL_SERVICE_NAME, when set, wins over the default name
        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service_name})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        tracing.use_tracer_provider(provider)
        self.provider = provider

    async def close(self) -> None:
        """Flush what is buffered and stop (in a thread: the export may talk to this very loop)."""
        if self.meters is not None:
            metrics().use_meter_provider(None)
            await asyncio.to_thread(self.meters.shutdown)
            self.meters = None
        if self.provider is not None:
            tracing.use_tracer_provider(None)
            await asyncio.to_thread(self.provider.shutdown)
            self.provider = None
