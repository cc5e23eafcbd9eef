"""Checks over finished spans: the tree of one trace, and that no content leaked into any."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext


def attrs(span: ReadableSpan) -> dict[str, Any]:
    """A span's attributes (none: empty), typed for reading in asserts."""
    return dict(span.attributes or {})


def span_id(context: SpanContext | None) -> int:
    """The span id of a span's context or parent (there must be one)."""
    assert context is not None
    return context.span_id


def by_trace(spans: Iterable[ReadableSpan]) -> dict[int, list[ReadableSpan]]:
    out: dict[int, list[ReadableSpan]] = {}
    for s in spans:
        assert s.context is not None
        out.setdefault(s.context.trace_id, []).append(s)
    return out


def tree(spans: Sequence[ReadableSpan]) -> list[tuple[str, str | None]]:
    """(name, parent name) for each span, sorted — the shape of a trace."""
    names = {s.context.span_id: s.name for s in spans if s.context is not None}
    return sorted((s.name, names.get(s.parent.span_id) if s.parent else None) for s in spans)


def leaked(spans: Iterable[ReadableSpan], secrets: Iterable[str]) -> list[tuple[str, str, Any]]:
    """(span, where, value) for every span name, attribute, event or link attribute holding one of
    `secrets`."""
    found = []
    needles = [s for s in secrets if s]
    for s in spans:
        values: list[tuple[str, Any]] = [("name", s.name), *(s.attributes or {}).items()]
        for ev in s.events:
            values += [(f"event {ev.name}", ev.name), *((f"event {k}", v) for k, v in (ev.attributes or {}).items())]
        for link in s.links:
            values += [(f"link {k}", v) for k, v in (link.attributes or {}).items()]
        if s.status.description:
            values.append(("status", s.status.description))
        for where, value in values:
            text = str(value)
            if any(n in text for n in needles):
                found.append((s.name, where, value))
    return found


@contextmanager
def recording_spans() -> Iterator[InMemorySpanExporter]:
    """Spans of treadle's tracer into memory for the block (the SDK, as a shape installs it)."""
    from treadle.telemetry import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_tracer_provider(None)
        provider.shutdown()
