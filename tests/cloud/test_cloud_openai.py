"""The OpenAI front door in the cloud shape: the real api Lambda handler (functions/api) fed API
Gateway events answers /v1/responses (plain and streamed) and a json_object chat completion with
the mock provider pinned as `mock/echo` (one model call: no worker, no queue)."""

from __future__ import annotations

import json
from typing import Any

from tests.support.lambda_sim import LambdaEnv, http_event
from tests.support.localcloud import API_TOKEN

AUTH = {"authorization": f"Bearer {API_TOKEN}", "content-type": "application/json"}


def post(api: LambdaEnv, path: str, body: Any) -> tuple[int, str, dict[str, str]]:
    resp = api.invoke(http_event("POST", path, headers=AUTH, body=body))
    return resp["statusCode"], resp["body"], {k.lower(): v for k, v in resp["headers"].items()}


def test_responses_and_structured_chat_through_the_api_lambda(api: LambdaEnv) -> None:
    status, body, _ = post(api, "/v1/responses", {"model": "mock/echo", "input": "hello cloud"})
    doc = json.loads(body)
    assert status == 200 and doc["object"] == "response" and doc["status"] == "completed", body
    assert doc["output"][0]["content"][0]["text"] == "hello cloud"

    status, body, headers = post(api, "/v1/responses", {"model": "mock/echo", "input": "streamed", "stream": True})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "streamed"

    status, body, _ = post(api, "/v1/chat/completions", {"model": "mock/echo", "response_format": {
        "type": "json_object"}, "messages": [{"role": "user", "content": '{"ok": true}'}]})
    assert status == 200 and json.loads(json.loads(body)["choices"][0]["message"]["content"]) == {"ok": True}

    status, body, _ = post(api, "/v1/responses", {"model": "mock/echo", "input": "x", "background": True})
    assert status == 400 and json.loads(body)["error"]["param"] == "background"
