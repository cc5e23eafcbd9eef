"""Webhook deliveries and schedule fires: each is a span, the run it starts is its child (one
trace from the HTTP request or the tick to the run's steps), and each is counted by outcome —
with nothing of the delivered body in any span."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.signing import github_headers
from tests.support.spans import attrs, by_trace, leaked, tree
from tests.support.triggers import client_for
from treadle.telemetry.metrics import Metrics
from treadle.testing import open_test_runtime

SECRET = "gh-" + uuid.uuid4().hex
WEBHOOKS = {"gh": {"agent": "echo", "auth": {"header": "X-Hub-Signature-256", "signing_secret_env": "TEST_OBS_GH"},
                   "payload_mapping": {"title": "$.issue.title"}}}
BODY = json.dumps({"issue": {"title": "SECRET-TITLE-77"}}).encode()


async def test_webhook_deliveries(migrated_db_url: str, spans: InMemorySpanExporter, fresh_metrics: Metrics,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_OBS_GH", SECRET)
    agents = {"echo": {"model": "echo"}}
    async with open_test_runtime(agents, database_url=migrated_db_url, config={"webhooks": WEBHOOKS}) as (rt, disp):
        await rt.triggers.sync_static()
        async with client_for(rt) as c:
            headers = github_headers(SECRET, BODY)
            first = await c.post("/v1/_webhooks/gh", content=BODY, headers=headers)
            again = await c.post("/v1/_webhooks/gh", content=BODY, headers=headers)
            forged = await c.post("/v1/_webhooks/gh", content=BODY,
                                  headers={**github_headers(SECRET, BODY), "X-Hub-Signature-256": "sha256=" + "0" * 64})
        await disp.drain()
    assert (first.status_code, again.status_code, forged.status_code) == (202, 200, 401)
    finished = spans.get_finished_spans()
    hooks = {attrs(s)["treadle.outcome"] if "treadle.outcome" in attrs(s) else attrs(s)["error.type"]: s
             for s in finished if s.name == "webhook gh"}
    assert set(hooks) == {"accepted", "duplicate", "InvalidSignature"}
    trace = by_trace(finished)[hooks["accepted"].context.trace_id]
    assert tree(trace) == sorted([("POST /v1/_webhooks/{name}", None), ("webhook gh", "POST /v1/_webhooks/{name}"),
                                  ("invoke_agent echo", "webhook gh"), ("step echo", "invoke_agent echo"),
                                  ("chat echo", "step echo")])
    assert leaked(finished, ["SECRET-TITLE-77", SECRET]) == []
    get = fresh_metrics.registry.get_sample_value  # type: ignore[union-attr]
    assert get("treadle_webhook_deliveries_total", {"outcome": "accepted"}) == 1
    assert get("treadle_webhook_deliveries_total", {"outcome": "duplicate"}) == 1
    assert get("treadle_webhook_deliveries_total", {"outcome": "invalid_signature"}) == 1


async def test_a_schedule_fire_starts_the_runs_trace(migrated_db_url: str, spans: InMemorySpanExporter,
                                                     fresh_metrics: Metrics) -> None:
    agents = {"echo": {"model": "echo"}}
    async with open_test_runtime(agents, database_url=migrated_db_url) as (rt, disp):
        svc = rt.triggers.schedules
        overlay = {"agent": "echo", "schedule": "* * * * *", "prompt": "SECRET-PROMPT-tick"}
        await svc.family.dispatch("default", {"op": "create", "name": "m", "overlay": overlay})
        st = await svc.resolve("default", "m")
        assert st.next_fire_at is not None
        result = await svc.firing.tick(st.next_fire_at + timedelta(seconds=1))
        await disp.drain()
    assert result.fired == 1
    finished = spans.get_finished_spans()
    (fire,) = [s for s in finished if s.name == "schedule fire m"]
    assert attrs(fire)["treadle.schedule.id"] == st.schedule_id and attrs(fire)["treadle.outcome"] == "started"
    trace = by_trace(finished)[fire.context.trace_id]
    assert tree(trace) == sorted([("schedule fire m", None), ("invoke_agent echo", "schedule fire m"),
                                  ("step echo", "invoke_agent echo"), ("chat echo", "step echo")])
    assert leaked(finished, ["SECRET-PROMPT-tick"]) == []
    assert fresh_metrics.registry.get_sample_value(  # type: ignore[union-attr]
        "treadle_schedule_fires_total", {"outcome": "started"}) == 1
