"""Tracing into an in-memory exporter (the SDK, as a shape would install it) and a fresh metrics
registry per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.spans import recording_spans
from treadle.telemetry.metrics import Metrics, use_metrics


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with recording_spans() as exporter:
        yield exporter


@pytest.fixture
def fresh_metrics() -> Iterator[Metrics]:
    m = Metrics()
    use_metrics(m)
    try:
        yield m
    finally:
        use_metrics(None)
