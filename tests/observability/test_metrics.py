"""GET /metrics on the sidecar (uvicorn on loopback) after a few runs, parsed with
prometheus_client's own parser: bearer-authed, and every series agrees with the database."""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx
import psycopg
from prometheus_client.parser import text_string_to_metric_families
from psycopg.rows import DictRow
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from treadle.config import Settings, parse_config
from treadle.telemetry.metrics import Metrics
from treadle.testing import ACCEPT_JSON, until

TOKEN = "metrics-" + secrets.token_hex(8)
CONFIG = parse_config({"agents": {
    "tools": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 2}},
    "echo": {"model": "echo"},
}})


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def one_row(conn: psycopg.Connection[DictRow], sql: str) -> DictRow:
    row = conn.execute(sql).fetchone()
    assert row is not None, sql
    return row


def total(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return sum(v for (n, lb), v in found.items() if n == name and set(labels.items()) <= set(lb))


async def wait_terminal(client: httpx.AsyncClient, run_ids: list[str]) -> None:
    async def ended() -> list[str] | None:
        statuses = [(await client.get(f"/v1/runs/{rid}")).json()["status"] for rid in run_ids]
        return None if set(statuses) - {"completed", "failed", "cancelled"} else statuses

    await until(ended, 30, interval=0.05, what=f"runs {run_ids} to finish")


async def test_metrics_agree_with_the_database(migrated_db_url: str, fresh_metrics: Metrics) -> None:
    settings = Settings(database_url=migrated_db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=2,
                        auth_token=TOKEN, sweep_interval_seconds=30.0)
    server = BackgroundServer(settings, CONFIG)
    url = await server.start()
    try:
        headers = {**ACCEPT_JSON, "authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=url, headers=headers) as client:
            started = []
            for agent in ["tools", "tools", "tools", "echo", "echo"]:
                resp = await client.post("/v1/runs", json={"agent": agent, "prompt": "hi"})
                assert resp.status_code == 202, resp.text
                started.append(resp.json()["run_id"])
            await wait_terminal(client, started)
            async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=url) as anonymous:
                refused = await anonymous.get("/metrics")
            resp = await client.get("/metrics")
    finally:
        await server.stop()
    assert refused.status_code == 401
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    found = samples(resp.text)

    with psycopg.connect(migrated_db_url, row_factory=psycopg.rows.dict_row) as conn:
        by_status = {r["status"]: r["n"] for r in conn.execute("SELECT status, count(*) AS n FROM runs GROUP BY 1")}
        sums = one_row(conn, "SELECT sum(step_no) AS steps, sum(iterations) AS iterations,"
                             " sum(input_tokens) AS input, sum(output_tokens) AS output FROM runs")
        tool_results = one_row(conn, "SELECT count(*) AS n FROM events WHERE type = 'tool_result'")["n"]
        jobs = one_row(conn, "SELECT count(*) AS n FROM jobs")["n"]

    assert by_status == {"completed": 5}
    assert total(found, "treadle_runs", status="completed") == 5
    assert total(found, "treadle_runs", status="failed") == 0
    assert total(found, "treadle_runs_parked") == 0
    assert total(found, "treadle_queue_depth") == jobs == 0
    # every step the workers ran, each model call and tool call, and the tokens, as recorded
    assert total(found, "treadle_steps_total") == sums["steps"] == 3 * 3 + 2
    assert total(found, "treadle_step_duration_seconds_count") == sums["steps"]
    assert total(found, "treadle_model_calls_total", provider="mock", outcome="ok") == sums["iterations"]
    assert total(found, "treadle_model_calls_total", model="tool-caller") == 9
    assert total(found, "treadle_model_call_duration_seconds_count") == sums["iterations"]
    assert total(found, "treadle_model_tokens_total", direction="input") == sums["input"]
    assert total(found, "treadle_model_tokens_total", direction="output") == sums["output"]
    assert total(found, "treadle_tool_calls_total", tool="Memory", outcome="ok") == tool_results == 6
    assert total(found, "process_resident_memory_bytes") > 0


def test_a_tool_name_the_agent_does_not_hold_is_not_a_label(fresh_metrics: Metrics) -> None:
    from treadle.telemetry.metrics import NOT_PERMITTED

    fresh_metrics.tool_call(NOT_PERMITTED, "error")
    assert fresh_metrics.registry is not None
    text = __import__("prometheus_client").generate_latest(fresh_metrics.registry).decode()
    assert 'tool="(not permitted)"' in text
