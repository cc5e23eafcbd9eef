"""POST /v1/_llm/chat against loomcycle's contract: the request and response shapes of its help
topic `llm-gateway` and of its TypeScript client's tests (adapters/ts/tests/llm-gateway.test.ts),
the SSE frame order of a stream, errors, tools through a fake vendor, and no run row per call."""

from __future__ import annotations

import logging
from typing import Any

from tests.support.frontdoors import Served, sse_events
from tests.support.vendors.base import Fail, text, tools

CALC = {"name": "calculator", "description": "Evaluate math",
        "input_schema": {"type": "object", "properties": {"expr": {"type": "string"}}}}


async def test_the_documented_request_and_response(served: Served) -> None:
    # loomcycle's documented request, with routing pinned to the mock provider
    body: dict[str, Any] = {
        "messages": [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "What is 2+2?"}],
        "tools": [CALC], "max_tokens": 4096, "temperature": None, "stream": False,
        "provider": "mock", "model": "echo", "user_id": "alice",
    }
    resp = await served.http.post("/v1/_llm/chat", json=body)
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert set(doc) == {"id", "request_id", "provider", "model", "content", "stop_reason", "usage"}
    assert doc["id"].startswith("llm_") and doc["request_id"].startswith("req_")
    assert (doc["provider"], doc["model"], doc["stop_reason"]) == ("mock", "echo", "end_turn")
    assert doc["content"] == [{"type": "text", "text": "What is 2+2?"}]
    assert {"input_tokens", "output_tokens"} <= set(doc["usage"])


async def test_a_stream_has_loomcycles_frame_order(served: Served) -> None:
    served.anthropic_fake.then(text("Hi", " there"))
    body = {"messages": [{"role": "user", "content": "hi"}], "provider": "anthropic-fake",
            "model": "claude-sonnet-4-5", "stream": True}
    async with served.http.stream("POST", "/v1/_llm/chat", json=body,
                                  headers={"Accept": "text/event-stream"}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        events = await sse_events(resp)
    kinds = [e.event for e in events]
    assert kinds[0] == "provider_chosen" and kinds[-3:] == ["content_block_stop", "message_delta", "done"]
    assert set(kinds[1:-3]) == {"content_block_start", "content_block_delta"} and kinds[1] == "content_block_start"
    assert events[0].data["provider"] == "anthropic-fake" and events[0].data["request_id"].startswith("req_")
    assert events[1].data == {"index": 0, "block": {"type": "text", "text": ""}}
    assert "".join(e.data["delta"]["text"] for e in events if e.event == "content_block_delta") == "Hi there"
    assert all(e.data["delta"]["type"] == "text_delta" for e in events if e.event == "content_block_delta")
    assert events[-2].data["delta"] == {"stop_reason": "end_turn"}
    assert events[-1].data["id"].startswith("llm_") and events[-1].data["stop_reason"] == "end_turn"
    assert served.anthropic_fake.violations == []


async def test_tools_round_trip_through_a_vendor(served: Served) -> None:
    fake = served.openai_fake
    fake.then(tools(("calculator", {"expr": "5*7"})), text("5 * 7 = 35"))
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "What is 5*7?"}]
    first = (await served.http.post("/v1/_llm/chat", json={"messages": msgs, "tools": [CALC], "model": "gpt"})).json()
    assert first["stop_reason"] == "tool_use" and first["provider"] == "openai-fake"
    use = first["content"][-1]
    assert (use["type"], use["name"], use["input"]) == ("tool_use", "calculator", {"expr": "5*7"})
    msgs += [{"role": "assistant", "tool_calls": [{"id": use["id"], "name": "calculator", "input": use["input"]}]},
             {"role": "tool", "tool_call_id": use["id"], "content": "35"}]
    second = (await served.http.post("/v1/_llm/chat", json={"messages": msgs, "tools": [CALC], "model": "gpt"})).json()
    assert second["content"] == [{"type": "text", "text": "5 * 7 = 35"}]
    assert fake.calls[-1]["messages"][-1] == {"role": "tool", "tool_call_id": use["id"], "content": "35"}
    assert fake.violations == []


async def test_the_default_tier_falls_back_and_no_run_is_recorded(served: Served) -> None:
    before = (await served.http.get("/v1/runs", params={"limit": 500})).json()["runs"]
    served.openai_fake.then(Fail("unknown_model"))
    served.anthropic_fake.then(text("fallback answer"))
    doc = (await served.http.post("/v1/_llm/chat", json={"messages": [{"role": "user", "content": "x"}]})).json()
    assert (doc["provider"], doc["content"][0]["text"]) == ("anthropic-fake", "fallback answer")
    after = (await served.http.get("/v1/runs", params={"limit": 500})).json()["runs"]
    assert [r["run_id"] for r in after] == [r["run_id"] for r in before]


async def test_a_failed_stream_ends_with_an_error_frame(served: Served) -> None:
    served.openai_fake.then(Fail("auth"))
    body = {"messages": [{"role": "user", "content": "x"}], "model": "gpt", "stream": True}
    async with served.http.stream("POST", "/v1/_llm/chat", json=body) as resp:
        events = await sse_events(resp)
    assert [e.event for e in events] == ["error"]
    assert events[0].data["type"] == "provider_error" and events[0].data["code"] == "auth_failed"


async def test_refusals_use_treadles_error_shape(served: Served) -> None:
    x = [{"role": "user", "content": "x"}]
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"messages": x, "user_tier": "pro"}, 422, "validation_error"),
        ({"messages": x, "stop_sequences": ["\n"]}, 422, "validation_error"),
        ({"messages": x, "tier": "gold"}, 404, "unknown_tier"),
        ({"messages": x, "provider": "nope", "model": "m"}, 400, "unknown_provider"),
        ({"messages": [{"role": "tool", "content": "r"}], "provider": "mock", "model": "echo"}, 400, "bad_request"),
        ({"messages": []}, 422, "validation_error"),
    ]
    for body, status, code in cases:
        resp = await served.http.post("/v1/_llm/chat", json=body)
        assert (resp.status_code, resp.json()["code"]) == (status, code), (body, resp.text)
    unauth = await served.http.post("/v1/_llm/chat", json={"messages": x}, headers={"Authorization": "Bearer no"})
    assert unauth.status_code == 401


async def test_a_rate_limit_is_retried_and_audited(served: Served, caplog: Any) -> None:
    served.openai_fake.then(Fail("rate_limit", retry_after="0"), text("after a retry"))
    with caplog.at_level(logging.INFO, logger="treadle.audit"):
        doc = (await served.http.post("/v1/_llm/chat", json={"messages": [{"role": "user", "content": "x"}],
                                                              "model": "gpt", "user_id": "bob"})).json()
    assert doc["content"] == [{"type": "text", "text": "after a retry"}]
    lines = [r.getMessage() for r in caplog.records if doc["request_id"] in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("llm_gateway: ")
    assert "user_id=bob" in lines[0] and "provider=openai-fake" in lines[0] and "retries=1" in lines[0]
    assert "status=ok" in lines[0]
