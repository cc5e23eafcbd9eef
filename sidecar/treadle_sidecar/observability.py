"""The sidecar's OpenTelemetry SDK: installed when the standard `OTEL_*` variables ask for traces
(`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_TRACES_EXPORTER`
= `otlp` | `console`), off otherwise and with `OTEL_SDK_DISABLED=true`. Spans leave in batches
(`OTEL_BSP_*`), the resource from `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES`."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping

from treadle.errors import ConfigError
from treadle.telemetry import tracing

EXPORTERS = ("otlp", "console", "none")


def traces_exporter(env: Mapping[str, str] | None = None) -> str:
    """`otlp`, `console` or `none` from the environment."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return "none"
    chosen = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if chosen:
        if chosen not in EXPORTERS:
            raise ConfigError(f"OTEL_TRACES_EXPORTER={chosen!r}: treadle exports traces with one of {EXPORTERS}")
        return chosen
    endpoints = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return "otlp" if any(env.get(k) for k in endpoints) else "none"


class Tracing:
    """The SDK tracer provider for the life of the app (None when tracing is off)."""

    def __init__(self, service_name: str = "treadle") -> None:
        self.provider = None
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
        if self.provider is not None:
            tracing.use_tracer_provider(None)
            await asyncio.to_thread(self.provider.shutdown)
            self.provider = None
