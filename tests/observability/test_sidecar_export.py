"""The sidecar's shape wiring: with OTEL_EXPORTER_OTLP_ENDPOINT set, spans leave over OTLP/HTTP
(protobuf) to a collector — here a loopback server that records what it receives."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from treadle_sidecar.observability import traces_exporter
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from tests.support.loopback import Answer, Loopback, Seen
from treadle.config import Settings, parse_config
from treadle.errors import ConfigError
from treadle.testing import ACCEPT_JSON, until

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CONFIG = parse_config({"agents": {"tools": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 1}}}})


async def test_spans_are_exported_over_otlp_http(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def collector(seen: Seen) -> Answer:
        return Answer(200, {"Content-Type": "application/x-protobuf"}, b"")

    async with Loopback({"/v1/traces": collector}) as otlp:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.url("").rstrip("/"))
        monkeypatch.setenv("OTEL_SERVICE_NAME", "treadle-under-test")
        monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
        monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
        settings = Settings(database_url=db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=1)
        server = BackgroundServer(settings, CONFIG)
        url = await server.start()
        try:
            async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=url) as client:
                started = await client.post("/v1/runs", json={"agent": "tools", "prompt": "hi"},
                                            headers={"traceparent": f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"})
                run_id = started.json()["run_id"]

                async def completed() -> bool:
                    return bool((await client.get(f"/v1/runs/{run_id}")).json()["status"] == "completed")

                await until(completed, 20, interval=0.05, what="the run to complete")
        finally:
            await server.stop()  # flushes the batch processor
    posts = [s for s in otlp.seen if s.path == "/v1/traces"]
    assert posts and all(s.method == "POST" and s.headers["content-type"] == "application/x-protobuf" for s in posts)
    names: dict[str, list[str]] = {}
    services = set()
    for post in posts:
        req = ExportTraceServiceRequest.FromString(post.body)
        for rs in req.resource_spans:
            services |= {a.value.string_value for a in rs.resource.attributes if a.key == "service.name"}
            for ss in rs.scope_spans:
                for sp in ss.spans:
                    run = next((a.value.string_value for a in sp.attributes if a.key == "treadle.run.id"), None)
                    if run == run_id or sp.name == "POST /v1/runs" or any(
                            a.key == "gen_ai.operation.name" for a in sp.attributes):
                        names.setdefault(sp.trace_id.hex(), []).append(sp.name)
    assert services == {"treadle-under-test"}
    # the caller's traceparent is honoured: its trace holds the request, the run and its steps
    assert sorted(names[CALLER_TRACE]) == sorted(["POST /v1/runs", "invoke_agent tools", "step tools", "step tools",
                                                  "chat tool-caller", "chat tool-caller", "execute_tool Memory"])


def test_the_exporter_follows_the_otel_variables() -> None:
    assert traces_exporter({}) == "none"
    assert traces_exporter({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) == "otlp"
    assert traces_exporter({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}) == "otlp"
    assert traces_exporter({"OTEL_TRACES_EXPORTER": "console"}) == "console"
    assert traces_exporter({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}) == "none"
    assert traces_exporter({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}) == "none"
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER"):
        traces_exporter({"OTEL_TRACES_EXPORTER": "zipkin"})
