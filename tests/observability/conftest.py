"""Tracing into an in-memory exporter (the SDK, as a shape would install it) and a fresh metrics
registry per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from treadle.telemetry import tracing
from treadle.telemetry.metrics import Metrics, use_metrics


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_tracer_provider(None)
        provider.shutdown()


@pytest.fixture
def fresh_metrics() -> Iterator[Metrics]:
    m = Metrics()
    use_metrics(m)
    try:
        yield m
    finally:
        use_metrics(None)
