"""The OpenAI front door in the cloud shape: the real api Lambda handler (functions/api) fed API
Gateway events answers /v1/responses (plain and streamed) and a json_object chat completion with
the mock provider pinned as `mock/echo` (one model call: no worker, no queue); and stored,
background agent responses whose runs SQS-driven worker invocations step."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.cloud.test_cloud_path import all_terminal, call, envs
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv, http_event
from tests.support.localcloud import API_TOKEN

__all__ = ["envs"]  # the fixture, shared with test_cloud_path

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


def _frames(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]


def test_stored_and_background_responses_through_the_cloud(envs: dict[str, LambdaEnv], sqs: Any,
                                                           queue: dict[str, str], cloud_db: str) -> None:
    """A background agent response in the cloud shape: queued by the API function, its run
    stepped by SQS-driven worker invocations (every message delivered twice); its stream read
    through the API function in pieces (each ends after its linger; the next resumes with
    `starting_after`), then retrieved, listed, chained, cancelled and deleted."""
    api = envs["api"]
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"], envs["worker#2"]], duplicate=True)
    status, created, _ = call(api, "POST", "/v1/responses", {"model": "calc", "input": "count", "background": True,
                                                             "user": "ada"})
    assert status == 200 and created["status"] == "queued" and created["background"] is True, created
    rid, run_id = created["id"], created["treadle"]["run_id"]
    asked = time.monotonic()
    status, early, headers = call(api, "GET", f"/v1/responses/{rid}", query="stream=true")
    assert time.monotonic() - asked < 15, "the buffered stream waited for the budget (25 s), not its linger"
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    seen = _frames(early)
    assert [e["type"] for e in seen][:2] == ["response.created", "response.in_progress"]
    assert seen[-1]["type"] != "response.completed"  # the run has not been stepped yet
    esm.run_until(lambda: all_terminal(cloud_db, [run_id]), timeout_s=60)
    status, rest, _ = call(api, "GET", f"/v1/responses/{rid}",
                           query=f"stream=true&starting_after={seen[-1]['sequence_number']}")
    seen += _frames(rest)
    assert [e["sequence_number"] for e in seen] == list(range(len(seen))) and seen[-1]["type"] == "response.completed"
    status, whole, _ = call(api, "GET", f"/v1/responses/{rid}", query="stream=true")
    assert _frames(whole) == seen  # every telling the same, by any invocation
    status, done, _ = call(api, "GET", f"/v1/responses/{rid}")
    assert status == 200 and done["status"] == "completed" and done == seen[-1]["response"], done
    status, items, _ = call(api, "GET", f"/v1/responses/{rid}/input_items")
    assert status == 200 and [i["role"] for i in items["data"]] == ["user"], items

    # a chained turn continues the run's session; a queued one is cancelled before a worker runs it
    status, chained, _ = call(api, "POST", "/v1/responses", {"model": "calc", "input": "again", "background": True,
                                                             "previous_response_id": rid})
    assert status == 200 and chained["previous_response_id"] == rid, chained
    esm.run_until(lambda: all_terminal(cloud_db, [chained["treadle"]["run_id"]]), timeout_s=60)
    status, second, _ = call(api, "GET", f"/v1/responses/{chained['id']}")
    assert second["status"] == "completed" and second["treadle"]["session_id"] == done["treadle"]["session_id"]
    status, slow, _ = call(api, "POST", "/v1/responses", {"model": "slow", "input": "x", "background": True})
    status, cancelled, _ = call(api, "POST", f"/v1/responses/{slow['id']}/cancel")
    assert status == 200 and cancelled["status"] == "cancelled", cancelled
    esm.run_until(lambda: all_terminal(cloud_db, [slow["treadle"]["run_id"]]), timeout_s=60)
    assert call(api, "GET", f"/v1/runs/{slow['treadle']['run_id']}")[1]["status"] == "cancelled"
    status, deleted, _ = call(api, "DELETE", f"/v1/responses/{rid}")
    assert status == 200 and deleted == {"id": rid, "object": "response", "deleted": True}
    status, gone, _ = call(api, "GET", f"/v1/responses/{rid}")
    assert status == 404 and gone["error"]["code"] == "response_not_found"
