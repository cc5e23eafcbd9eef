"""Telemetry: OpenTelemetry spans (API only: a shape wires the SDK and its exporter), process
metrics for `/metrics` and the cloud's EMF, and log records that carry the run they belong to.

Nothing here ever puts content (a prompt, a completion, a tool's input or result, a secret) into
a span attribute or a metric label: only ids, names, counts, durations and outcomes.
"""
