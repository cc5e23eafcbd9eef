"""The Prometheus instruments behind telemetry.metrics (imported only where a registry is wanted:
the sidecar and tests; a Lambda writes EMF instead and skips this import's ~40 ms)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.process_collector import ProcessCollector

_STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 14400, 86400)
_MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)


class PromInstruments:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=r)  # process_resident_memory_bytes, cpu, open fds
        self.steps = Counter("treadle_steps", "Steps run, by result", ["result"], registry=r)
        self.step_seconds = Histogram("treadle_step_duration_seconds", "Duration of one step (one loop iteration)",
                                      ["result"], buckets=_STEP_BUCKETS, registry=r)
        self.run_seconds = Histogram("treadle_run_duration_seconds", "From a run's creation to its end (parked "
                                     "time included)", buckets=_RUN_BUCKETS, registry=r)
        self.runs_finished = Counter("treadle_runs_finished", "Runs that ended in this process, by final status",
                                     ["status"], registry=r)
        self.model_calls = Counter("treadle_model_calls", "Model requests, by provider, model and outcome",
                                   ["provider", "model", "outcome"], registry=r)
        self.model_seconds = Histogram("treadle_model_call_duration_seconds", "Duration of one model request",
                                       ["provider", "model"], buckets=_MODEL_BUCKETS, registry=r)
        self.model_tokens = Counter("treadle_model_tokens", "Tokens, by provider, model and direction",
                                    ["provider", "model", "direction"], registry=r)
        self.tool_calls = Counter("treadle_tool_calls", "Tool calls, by tool and outcome", ["tool", "outcome"],
                                  registry=r)
        self.sweeper = Counter("treadle_sweeper_actions",
                               "Sweeper actions (requeued steps, woken runs, ended stalled sessions)",
                               ["action"], registry=r)
        self.webhooks = Counter("treadle_webhook_deliveries", "Webhook deliveries, by outcome", ["outcome"],
                                registry=r)
        self.schedules = Counter("treadle_schedule_fires", "Schedule fires, by outcome", ["outcome"], registry=r)
        self.budgets = Counter("treadle_budget_crossings",
                               "Budgets crossed (soft: recorded; hard: a run stopped; refused: a run not started)",
                               ["scope", "severity"], registry=r)
