"""A2A in the cloud shape: the API function (API Gateway HTTP API, payload 2.0) serves the Agent
Card and the JSON-RPC binding, the worker Lambda steps the task's run through SQS; the task is
read back from the database by a later invocation (nothing held between them)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.support.lambda_sim import EventSourceMapping, LambdaEnv, http_event
from tests.support.localcloud import API_TOKEN

ROUTE = "ANY /{proxy+}"
HEADERS = {"authorization": f"Bearer {API_TOKEN}", "a2a-version": "1.0"}



def rpc(fn: LambdaEnv, method: str, params: dict[str, Any]) -> tuple[int, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    resp = fn.invoke(http_event("POST", "/a2a/jsonrpc", headers=HEADERS, body=body, route_key=ROUTE))
    return resp["statusCode"], json.loads(resp["body"])


def test_card_send_and_get_through_api_gateway(api: LambdaEnv, worker: LambdaEnv, sqs: Any,
                                               queue: dict[str, str]) -> None:
    card = api.invoke(http_event("GET", "/.well-known/agent-card.json", route_key=ROUTE))
    assert card["statusCode"] == 200
    assert [s["id"] for s in json.loads(card["body"])["skills"]] == ["echo"]
    status, doc = rpc(api, "SendMessage", {
        "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "from the cloud"}]},
        "configuration": {"returnImmediately": True}})
    assert status == 200, doc
    task = doc["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker])

    def done() -> bool:
        _, got = rpc(api, "GetTask", {"id": task["id"]})
        return bool(got["result"]["status"]["state"] == "TASK_STATE_COMPLETED")

    esm.run_until(done, timeout_s=60)
    _, got = rpc(api, "GetTask", {"id": task["id"]})
    assert "from the cloud" in got["result"]["artifacts"][0]["parts"][0]["text"]
    anon = api.invoke(http_event("POST", "/a2a/jsonrpc", body={"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                                                               "params": {"id": task["id"]}}, route_key=ROUTE))
    assert anon["statusCode"] == 401
