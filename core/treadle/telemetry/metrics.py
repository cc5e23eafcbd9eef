"""The process's measurements: steps, model calls and tokens, tool calls, sweeper actions, webhook
deliveries, schedule fires — into Prometheus instruments (`GET /metrics` renders them with the
database's gauges) and into any extra sinks a shape adds (the cloud's EMF).

Labels are names and outcomes only — a tool name the agent does not hold is counted as
`(not permitted)`, never as what the model wrote.

Usage and cost (issue 42 item 1) go to OpenTelemetry metrics when a shape installs a meter
provider (`use_meter_provider`): `treadle.usage.tokens` (by `kind`: input, output,
cache_creation, cache_read), `treadle.usage.calls` and `treadle.usage.cost` (with `currency`),
with the dimensions of `GET /v1/_usage` as attributes — tenant, user, agent, def (the AgentDef id),
provider, model. They are recorded once a step's commit carrying the `usage` events succeeded
(store/steps.py), so they count what `usage_daily` counts. Not in Prometheus: a user id per label
set would grow a scrape without bound; an OTLP backend aggregates them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from treadle.telemetry.prometheus import PromInstruments

NOT_PERMITTED = "(not permitted)"


class MetricsSink(Protocol):
    """Another destination for the same measurements (cloud/treadle_cloud/metrics.py: EMF)."""

    def add(self, name: str, value: float, unit: str, dimensions: dict[str, str]) -> None: ...


class Metrics:
    """`prometheus=False`: no Prometheus instruments (a Lambda, which writes EMF through a sink)."""

    def __init__(self, *, prometheus: bool = True) -> None:
        self.sinks: list[MetricsSink] = []
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self.prom: PromInstruments | None = None
        if prometheus:
            from treadle.telemetry.prometheus import PromInstruments

            self.prom = PromInstruments()

    def _child(self, metric: Any, *values: str) -> Any:
        """`metric.labels(*values)`, remembered: prometheus_client's `labels` validates and locks on
        every call (a few µs, several times per step); the label values are names and outcomes, a
        small set, as prometheus_client's own table of children is."""
        key = (metric, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def use_meter_provider(self, provider: Any | None) -> None:
        """Record usage into OpenTelemetry instruments of `provider` (an SDK MeterProvider);
        None: stop."""
        self._usage_instruments = None
        if provider is None:
            return
        meter = provider.get_meter("treadle")
        self._usage_instruments = (
            meter.create_counter("treadle.usage.tokens", unit="{token}",
                                 description="Model tokens, by tenant, user, agent, def, provider, model and kind"),
            meter.create_counter("treadle.usage.calls", unit="{call}",
                                 description="Model calls recorded, by tenant, user, agent, def, provider and model"),
            meter.create_counter("treadle.usage.cost", unit="1",
                                 description="Priced cost (the pricing: table), by the usage dimensions and currency"),
        )

    _usage_instruments: tuple[Any, Any, Any] | None = None

    def usage(self, dims: dict[str, str], calls: int, tokens: dict[str, int], cost: float, currency: str) -> None:
        """A committed step's model calls of one (provider, model): `dims` are tenant, user,
        agent, def, provider, model; `tokens` by kind; `cost` in `currency` ("" when unpriced)."""
        if self._usage_instruments is None:
            return
        counter_tokens, counter_calls, counter_cost = self._usage_instruments
        counter_calls.add(calls, dims)
        for kind, n in tokens.items():
            if n:
                counter_tokens.add(n, {**dims, "kind": kind})
        if currency:
            counter_cost.add(cost, {**dims, "currency": currency})

    @property
    def registry(self) -> CollectorRegistry | None:
        return self.prom.registry if self.prom is not None else None

    def _emit(self, name: str, value: float, unit: str, **dimensions: str) -> None:
        for sink in self.sinks:
            sink.add(name, value, unit, dimensions)

    def step(self, result: str, seconds: float) -> None:
        if self.prom is not None:
            self._child(self.prom.steps, result).inc()
            self._child(self.prom.step_seconds, result).observe(seconds)
        self._emit("StepDuration", seconds * 1000, "Milliseconds", result=result)

    def run_finished(self, seconds: float, status: str) -> None:
        """A run ended here with `status` (completed | failed | cancelled): the failed-run rate
        is what the cloud shape's FailedRunsAlarm watches."""
        if self.prom is not None:
            self.prom.run_seconds.observe(seconds)
            self._child(self.prom.runs_finished, status).inc()
        self._emit("RunDuration", seconds * 1000, "Milliseconds")
        self._emit("RunsFinished", 1, "Count", status=status)

    def model_call(self, provider: str, model: str, outcome: str, seconds: float,
                   input_tokens: int = 0, output_tokens: int = 0) -> None:
        if self.prom is not None:
            self._child(self.prom.model_calls, provider, model, outcome).inc()
            self._child(self.prom.model_seconds, provider, model).observe(seconds)
            if input_tokens:
                self._child(self.prom.model_tokens, provider, model, "input").inc(input_tokens)
            if output_tokens:
                self._child(self.prom.model_tokens, provider, model, "output").inc(output_tokens)
        self._emit("ModelCallDuration", seconds * 1000, "Milliseconds", provider=provider, outcome=outcome)
        self._emit("ModelTokens", input_tokens + output_tokens, "Count", provider=provider)

    def tool_call(self, tool: str, outcome: str) -> None:
        if self.prom is not None:
            self._child(self.prom.tool_calls, tool, outcome).inc()
        self._emit("ToolCalls", 1, "Count", outcome=outcome)

    def sweeper_action(self, action: str, n: int) -> None:
        if n:
            if self.prom is not None:
                self._child(self.prom.sweeper, action).inc(n)
            self._emit("SweeperActions", n, "Count", action=action)

    def webhook_delivery(self, outcome: str) -> None:
        if self.prom is not None:
            self._child(self.prom.webhooks, outcome).inc()
        self._emit("WebhookDeliveries", 1, "Count", outcome=outcome)

    def budget_crossed(self, scope: str, severity: str) -> None:
        """A budget (governance/budgets.py) of `scope` crossed: `soft` (a run recorded it), `hard`
        (a run stopped at its boundary) or `refused` (a run was not started)."""
        if self.prom is not None:
            self._child(self.prom.budgets, scope, severity).inc()
        self._emit("BudgetCrossings", 1, "Count", scope=scope, severity=severity)

    def schedule_fire(self, outcome: str) -> None:
        if self.prom is not None:
            self._child(self.prom.schedules, outcome).inc()
        self._emit("ScheduleFires", 1, "Count", outcome=outcome)


_metrics: Metrics | None = None


def metrics() -> Metrics:
    """The process's metrics (created on first use, with Prometheus instruments)."""
    global _metrics
    if _metrics is None:
        _metrics = Metrics()
    return _metrics


def use_metrics(m: Metrics | None) -> None:
    """Replace the process's metrics (a shape at start, tests); None: a new one on next use."""
    global _metrics
    _metrics = m
