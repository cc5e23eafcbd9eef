"""Every run failing moves a metric (issue 43 item 4): a run's end is counted by its final status,
in Prometheus (`treadle_runs_finished_total{status}`) and in every sink (the cloud's EMF
`RunsFinished{status}`, which the stack's FailedRunsAlarm watches)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from treadle.store.runs import NewRun
from treadle.telemetry.metrics import Metrics, use_metrics
from treadle.testing import open_test_runtime, user_text

AGENTS: dict[str, Any] = {
    "doomed": {"model": "echo", "mock": {"error_rate": 1.0}},  # every model call a 429: the run fails
    "fine": {"model": "echo"},
}


class Captured:
    def __init__(self) -> None:
        self.points: list[tuple[str, float, dict[str, str]]] = []

    def add(self, name: str, value: float, unit: str, dimensions: dict[str, str]) -> None:
        self.points.append((name, value, dimensions))


async def test_failed_runs_are_counted_by_status(db_url: str, tmp_path: Path) -> None:
    m, sink = Metrics(), Captured()
    m.sinks.append(sink)
    use_metrics(m)
    try:
        async with open_test_runtime(AGENTS, database_url=db_url, home=tmp_path) as (rt, disp):
            for agent in ("doomed", "doomed", "doomed", "fine"):
                await rt.start_run(NewRun(tenant_id="t-outcomes", agent=agent, segments=user_text("go")))
            await disp.drain()
    finally:
        use_metrics(None)
    ended = sorted(d["status"] for name, _, d in sink.points if name == "RunsFinished")
    assert ended == ["completed", "failed", "failed", "failed"]
    assert m.prom is not None
    assert m.prom.registry.get_sample_value("treadle_runs_finished_total", {"status": "failed"}) == 3
    assert m.prom.registry.get_sample_value("treadle_runs_finished_total", {"status": "completed"}) == 1
