"""Usage and cost as OpenTelemetry metrics (issue 42 item 1): a served sidecar with
OTEL_EXPORTER_OTLP_ENDPOINT set exports `treadle.usage.tokens`, `.calls` and `.cost` over
OTLP/HTTP to a loopback collector, with the dimensions of GET /v1/_usage as attributes (tenant,
user, agent, def, provider, model) — and their sums per attribute set equal the roll-up's rows."""

from __future__ import annotations

import secrets
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from treadle_sidecar.observability import traces_exporter
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from tests.support.e2e import query
from tests.support.loopback import Answer, Loopback, Seen
from treadle.config import Settings, parse_config
from treadle.testing import ACCEPT_JSON, until

CONFIG = parse_config({
    "agents": {"tools": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 2}},
               "talker": {"model": "echo"}},
    "pricing": {"currency": "USD", "models": {"mock/tool-caller": {"input": 3.0, "output": 15.0}}},
})
DIMS = ("tenant", "user", "agent", "def", "provider", "model")
ANN, BOB = "ann-" + secrets.token_hex(4), "bob-" + secrets.token_hex(4)
COLUMN = {"tenant": "tenant_id", "user": "user_id", "agent": "agent", "def": "def_id", "provider": "provider",
          "model": "model"}


def points(posts: list[Seen]) -> dict[str, dict[tuple[Any, ...], float]]:
    """metric name → attribute values (DIMS, then kind or currency) → the last cumulative sum."""
    out: dict[str, dict[tuple[Any, ...], float]] = defaultdict(dict)
    for post in posts:
        req = ExportMetricsServiceRequest.FromString(post.body)
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for p in metric.sum.data_points:
                        attrs = {a.key: a.value.string_value for a in p.attributes}
                        key = (*(attrs[d] for d in DIMS), attrs.get("kind") or attrs.get("currency"))
                        out[metric.name][key] = p.as_int if p.HasField("as_int") else p.as_double
    return out


async def test_usage_is_exported_as_otel_metrics_with_the_reports_dimensions(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Loopback({"/v1/metrics": lambda seen: Answer(200, {"Content-Type": "application/x-protobuf"}, b""),
                         "/v1/traces": lambda seen: Answer(200, {}, b"")}) as otlp:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.url("").rstrip("/"))
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
        monkeypatch.delenv("OTEL_METRICS_EXPORTER", raising=False)
        monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
        settings = Settings(database_url=db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=1)
        server = BackgroundServer(settings, CONFIG)
        url = await server.start()
        try:
            async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=url) as client:
                runs = [(await client.post("/v1/runs", json={"agent": agent, "prompt": "hi", "user_id": user})).json()
                        ["run_id"] for agent, user in (("tools", ANN), ("tools", BOB), ("talker", ANN))]

                async def completed() -> bool:
                    got = [(await client.get(f"/v1/runs/{r}")).json()["status"] for r in runs]
                    return all(s == "completed" for s in got)

                await until(completed, 30, interval=0.05, what="the runs to complete")
        finally:
            await server.stop()  # shuts the meter provider down: the last export
    got = points([s for s in otlp.seen if s.path == "/v1/metrics"])
    rows = await query(db_url, "SELECT tenant_id, user_id, agent, def_id, provider, model, currency,"
                               " sum(calls) AS calls, sum(input_tokens) AS i, sum(output_tokens) AS o,"
                               " sum(cost) AS cost FROM usage_daily WHERE user_id IN (%s, %s)"
                               " GROUP BY 1, 2, 3, 4, 5, 6, 7", (ANN, BOB))
    assert len(rows) == 3  # (ann, tools), (bob, tools), (ann, talker)
    calls, tokens, costs = got["treadle.usage.calls"], got["treadle.usage.tokens"], got["treadle.usage.cost"]
    for r in rows:
        dims = tuple(r[COLUMN[d]] for d in DIMS)
        assert calls[(*dims, None)] == r["calls"] > 0
        assert tokens[(*dims, "input")] == r["i"] > 0 and tokens[(*dims, "output")] == r["o"] > 0
        if r["currency"]:
            assert costs[(*dims, "USD")] == pytest.approx(r["cost"]) and r["cost"] > 0
        else:  # unpriced: no cost point
            assert not any(k[:6] == dims for k in costs)
    mine = {k[:6] for k in calls if k[1] in (ANN, BOB)}  # the database is shared with other tests
    assert mine == {tuple(r[COLUMN[d]] for d in DIMS) for r in rows}


def test_the_metrics_exporter_follows_the_otel_variables() -> None:
    assert traces_exporter({}, signal="metrics") == "none"
    assert traces_exporter({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, signal="metrics") == "otlp"
    assert traces_exporter({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://x/v1/metrics"}, signal="metrics") == "otlp"
    assert traces_exporter({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x/v1/traces"}, signal="metrics") == "none"
    off = {"OTEL_METRICS_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"}
    assert traces_exporter(off, signal="metrics") == "none"
