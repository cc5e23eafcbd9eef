"""GET /metrics: Prometheus text, bearer-authed like the API.

Two sources: the process's counters and histograms (telemetry/metrics.py: steps, model calls,
tokens, tool calls, sweeper actions, webhook deliveries, schedule fires, process RSS), and gauges
read from the database at scrape time (runs by status, parked runs, queue depth and the age of
the oldest due job) — those hold for the whole deployment, whichever process answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, Response

from treadle.api.deps import get_principal, get_runtime
from treadle.api.errors import AUTHED, errors
from treadle.errors import Forbidden
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.store.db import Pool
from treadle.telemetry.metrics import metrics

if TYPE_CHECKING:
    from prometheus_client.core import GaugeMetricFamily

#: Prometheus' text format 0.0.4 (prometheus_client.CONTENT_TYPE_LATEST; imported on first scrape,
#: so a Lambda serving the API never pays for prometheus_client's import)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

router = APIRouter(tags=["ops"])

RUN_STATUSES = ("queued", "running", "waiting", "completed", "failed", "cancelled")


@dataclass(slots=True, eq=False)  # a registry keys collectors by identity
class DbSnapshot:
    runs_by_status: dict[str, int] = field(default_factory=dict)
    jobs_due: int = 0
    jobs_total: int = 0
    oldest_due_s: float = 0.0

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from prometheus_client.core import GaugeMetricFamily

        runs = GaugeMetricFamily("treadle_runs", "Runs by status (database)", labels=["status"])
        for status in sorted({*RUN_STATUSES, *self.runs_by_status}):
            runs.add_metric([status], self.runs_by_status.get(status, 0))
        yield runs
        yield GaugeMetricFamily("treadle_runs_parked", "Runs parked waiting on a tool, an input or a "
                                "deadline (status waiting)", value=self.runs_by_status.get("waiting", 0))
        yield GaugeMetricFamily("treadle_queue_depth", "Jobs due in the Postgres queue (0 with SQS)",
                                value=self.jobs_due)
        yield GaugeMetricFamily("treadle_queue_jobs", "Jobs in the Postgres queue, due or delayed",
                                value=self.jobs_total)
        yield GaugeMetricFamily("treadle_queue_oldest_job_age_seconds",
                                "How long the oldest due job has waited (0: none)", value=self.oldest_due_s)


async def db_snapshot(pool: Pool) -> DbSnapshot:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT status, count(*) AS n FROM runs GROUP BY status")
        by_status = {r["status"]: int(r["n"]) for r in await cur.fetchall()}
        cur = await conn.execute(
            "SELECT count(*) FILTER (WHERE run_at <= now()) AS due, count(*) AS total,"
            " coalesce(extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now())), 0) AS oldest"
            " FROM jobs"
        )
        row: Any = await cur.fetchone()
    return DbSnapshot(by_status, int(row["due"]), int(row["total"]), max(0.0, float(row["oldest"])))


async def render(pool: Pool) -> bytes:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.process_collector import ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    own = metrics().registry
    if own is not None:
        registry.register(own)
    else:  # a process without Prometheus instruments (a Lambda): its RSS still
        ProcessCollector(registry=registry)
    registry.register(await db_snapshot(pool))
    return generate_latest(registry)


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}}}, **errors(*AUTHED)})
async def prometheus_metrics(
    principal: Principal = Depends(get_principal), rt: Runtime = Depends(get_runtime)
) -> Response:
    """The process's and the database's figures, every tenant's counted together: the operator's
    (an admin of the default tenant); another tenant's admin token gets 403."""
    if not (principal.open_mode or principal.is_operator):
        raise Forbidden("/metrics counts every tenant's runs: only the operator (an admin of the default tenant)"
                        " reads it", scope="substrate:admin")
    return Response(await render(rt.pool), media_type=CONTENT_TYPE)
