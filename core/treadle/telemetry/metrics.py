"""The process's counters and histograms, in a Prometheus registry (`GET /metrics` renders it
with the database's gauges), and forwarded to any extra sinks a shape adds (the cloud's EMF).

Labels are names and outcomes only — a tool name the agent does not hold is counted as
`(not permitted)`, never as what the model wrote.
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.process_collector import ProcessCollector

NOT_PERMITTED = "(not permitted)"

_STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)


class MetricsSink(Protocol):
    """Another destination for the same measurements (cloud/treadle_cloud/metrics.py: EMF)."""

    def add(self, name: str, value: float, unit: str, dimensions: dict[str, str]) -> None: ...


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.sinks: list[MetricsSink] = []
        r = self.registry
        ProcessCollector(registry=r)  # process_resident_memory_bytes, cpu, open fds
        self.steps = Counter("treadle_steps", "Steps run, by result", ["result"], registry=r)
        self.step_seconds = Histogram("treadle_step_duration_seconds", "Duration of one step (one loop iteration)",
                                      ["result"], buckets=_STEP_BUCKETS, registry=r)
        self.model_calls = Counter("treadle_model_calls", "Model requests, by provider, model and outcome",
                                   ["provider", "model", "outcome"], registry=r)
        self.model_seconds = Histogram("treadle_model_call_duration_seconds", "Duration of one model request",
                                       ["provider", "model"], buckets=_MODEL_BUCKETS, registry=r)
        self.model_tokens = Counter("treadle_model_tokens", "Tokens, by provider, model and direction",
                                    ["provider", "model", "direction"], registry=r)
        self.tool_calls = Counter("treadle_tool_calls", "Tool calls, by tool and outcome", ["tool", "outcome"],
                                  registry=r)
        self.sweeper = Counter("treadle_sweeper_actions", "Sweeper actions (requeued steps, woken runs)",
                               ["action"], registry=r)
        self.webhooks = Counter("treadle_webhook_deliveries", "Webhook deliveries, by outcome", ["outcome"],
                                registry=r)
        self.schedules = Counter("treadle_schedule_fires", "Schedule fires, by outcome", ["outcome"], registry=r)

    def _emit(self, name: str, value: float, unit: str, **dimensions: str) -> None:
        for sink in self.sinks:
            sink.add(name, value, unit, dimensions)

    def step(self, result: str, seconds: float) -> None:
        self.steps.labels(result).inc()
        self.step_seconds.labels(result).observe(seconds)
        self._emit("StepDuration", seconds * 1000, "Milliseconds", result=result)

    def model_call(self, provider: str, model: str, outcome: str, seconds: float,
                   input_tokens: int = 0, output_tokens: int = 0) -> None:
        self.model_calls.labels(provider, model, outcome).inc()
        self.model_seconds.labels(provider, model).observe(seconds)
        if input_tokens:
            self.model_tokens.labels(provider, model, "input").inc(input_tokens)
        if output_tokens:
            self.model_tokens.labels(provider, model, "output").inc(output_tokens)
        self._emit("ModelCallDuration", seconds * 1000, "Milliseconds", provider=provider, outcome=outcome)
        self._emit("ModelTokens", input_tokens + output_tokens, "Count", provider=provider)

    def tool_call(self, tool: str, outcome: str) -> None:
        self.tool_calls.labels(tool, outcome).inc()
        self._emit("ToolCalls", 1, "Count", outcome=outcome)

    def sweeper_action(self, action: str, n: int) -> None:
        if n:
            self.sweeper.labels(action).inc(n)
            self._emit("SweeperActions", n, "Count", action=action)

    def webhook_delivery(self, outcome: str) -> None:
        self.webhooks.labels(outcome).inc()
        self._emit("WebhookDeliveries", 1, "Count", outcome=outcome)

    def schedule_fire(self, outcome: str) -> None:
        self.schedules.labels(outcome).inc()
        self._emit("ScheduleFires", 1, "Count", outcome=outcome)


_metrics: Metrics | None = None


def metrics() -> Metrics:
    """The process's metrics (created on first use)."""
    global _metrics
    if _metrics is None:
        _metrics = Metrics()
    return _metrics


def use_metrics(m: Metrics | None) -> None:
    """Replace the process's metrics (tests: a fresh registry); None: a new one on next use."""
    global _metrics
    _metrics = m
