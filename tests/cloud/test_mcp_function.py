"""The `mcp` Lambda (functions/mcp/handler.py) fed API Gateway HTTP API (payload 2.0) events:
stateless Streamable HTTP, one JSON-RPC message per invocation, bearer auth as the API, and a
`spawn_runs` join that waits on the database while the worker Lambda (through SQS) steps the runs
— it holds no worker, and at its timeout it answers with what settled so far."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support.lambda_sim import EventSourceMapping, LambdaEnv, http_event
from tests.support.localcloud import API_TOKEN

ROUTE = "ANY /v1/_mcp"
HEADERS = {"authorization": f"Bearer {API_TOKEN}", "accept": "application/json, text/event-stream"}


@pytest.fixture
def mcp(cloud_env: dict[str, str]) -> Iterator[LambdaEnv]:
    env = LambdaEnv("mcp")
    yield env
    env.close()



def rpc(fn: LambdaEnv, method: str, params: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None,
        msg_id: int = 1) -> tuple[int, Any]:
    body = {"jsonrpc": "2.0", "id": msg_id, "method": method, **({"params": params} if params is not None else {})}
    resp = fn.invoke(http_event("POST", "/v1/_mcp", headers=headers or HEADERS, body=body, route_key=ROUTE))
    doc = json.loads(resp["body"]) if resp.get("body") else None
    return resp["statusCode"], doc


def call_tool(fn: LambdaEnv, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    status, doc = rpc(fn, "tools/call", {"name": name, "arguments": arguments})
    assert status == 200, doc
    result = doc["result"]
    return {"is_error": result.get("isError", False), **json.loads(result["content"][0]["text"])}


def test_initialize_list_and_errors_through_api_gateway(mcp: LambdaEnv) -> None:
    status, doc = rpc(mcp, "initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "tests", "version": "1"},
    })
    assert status == 200, doc  # API Gateway's Host header is accepted (no DNS-rebinding refusal behind a token)
    assert doc["result"]["serverInfo"]["name"] == "treadle"
    status, doc = rpc(mcp, "tools/list", msg_id=2)
    assert status == 200 and {"spawn_runs", "get_run", "cancel_run"} <= {t["name"] for t in doc["result"]["tools"]}
    missing = call_tool(mcp, "get_run", {"run_id": "r_doesnotexist"})
    assert missing["is_error"] and missing["code"] == "run_not_found"

    status, doc = rpc(mcp, "tools/list", headers={**HEADERS, "authorization": "Bearer wrong"})
    assert (status, doc["code"]) == (401, "unauthorized")
    resp = mcp.invoke(http_event("GET", "/v1/_mcp/unknown", headers=HEADERS, route_key=ROUTE))
    assert resp["statusCode"] == 404 and json.loads(resp["body"])["code"] == "not_found"


def test_spawn_runs_join_waits_on_the_database_while_the_worker_steps_the_runs(
    mcp: LambdaEnv, worker: LambdaEnv, sqs: Any, queue: dict[str, str]
) -> None:
    # no worker running: the join answers at its timeout with every slot unsettled, in order
    early = call_tool(mcp, "spawn_runs", {"runs": [{"agent": "echo", "prompt": f"n{i}"} for i in range(3)],
                                          "timeout_ms": 1000})
    assert early["timed_out"] is True and early["settled"] == 0
    assert [r["index"] for r in early["results"]] == [0, 1, 2]
    assert all(not r["settled"] and r["status"] == "queued" for r in early["results"])

    # the next join runs in its own invocation while the worker Lambda drains the queue
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker])
    with ThreadPoolExecutor(1) as pool:
        joined = pool.submit(call_tool, mcp, "spawn_runs", {
            "runs": [{"agent": "calc", "prompt": "sum"}, {"agent": "echo", "prompt": "hello there"}],
            "timeout_ms": 50_000,
        })
        esm.run_until(joined.done, timeout_s=60)
        out = joined.result()
    assert out["timed_out"] is False and out["settled"] == 2, out
    calc, echo = out["results"]
    assert calc["status"] == "completed" and calc["final_text"] == "done after 3 tool calls"
    assert echo["status"] == "completed" and "hello there" in echo["final_text"]
    # the earlier, timed-out children were stepped too: get_run sees them settle
    for r in early["results"]:
        got = call_tool(mcp, "get_run", {"run_id": r["run_id"], "wait_ms": 10_000})
        assert got["status"] == "completed", got


#: a 2026-07-28 request: no handshake, the version and the client's capabilities on every request
MODERN = {**HEADERS, "mcp-protocol-version": "2026-07-28"}


def _modern_params(params: dict[str, Any], *, tasks: bool = True) -> dict[str, Any]:
    caps: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}} if tasks else {}
    return {**params, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
                                "io.modelcontextprotocol/clientCapabilities": caps}}


def test_tasks_in_both_revisions_follow_runs_the_worker_steps(
    mcp: LambdaEnv, worker: LambdaEnv, sqs: Any, queue: dict[str, str]
) -> None:
    """A task is a run: the mcp function answers a task handle at once (2025-11-25 `task`, or a
    2026-07-28 call whose runs are not done at timeout_ms), and tasks/get — each request its own
    invocation — reads the run rows while the worker Lambda steps them through SQS."""
    status, doc = rpc(mcp, "tools/call", {"name": "spawn_run", "arguments": {"agent": "calc", "prompt": "sum"},
                                          "task": {"ttl": 60_000}})
    assert status == 200 and doc["result"]["task"]["status"] == "working", doc
    legacy_id = doc["result"]["task"]["taskId"]
    status, doc = rpc(mcp, "tools/call", _modern_params({"name": "spawn_runs", "arguments": {
        "runs": [{"agent": "echo", "prompt": "m1"}, {"agent": "echo", "prompt": "m2"}], "timeout_ms": 0}}),
        headers={**MODERN, "mcp-method": "tools/call", "mcp-name": "spawn_runs"})
    assert status == 200 and doc["result"]["resultType"] == "task", doc
    modern_id = doc["result"]["taskId"]
    assert modern_id.startswith("runs:") and doc["result"]["status"] == "working"

    def modern_get() -> dict[str, Any]:
        code, got = rpc(mcp, "tasks/get", _modern_params({"taskId": modern_id}), headers={
            **MODERN, "mcp-method": "tasks/get", "mcp-name": modern_id})
        assert code == 200, got
        return dict(got["result"])

    def both_done() -> bool:
        code, got = rpc(mcp, "tasks/get", {"taskId": legacy_id})
        assert code == 200, got
        return bool(got["result"]["status"] == "completed" and modern_get()["status"] == "completed")

    EventSourceMapping(sqs, queue["url"], queue["arn"], [worker]).run_until(both_done, timeout_s=60)
    status, doc = rpc(mcp, "tasks/result", {"taskId": legacy_id})
    assert status == 200 and json.loads(doc["result"]["content"][0]["text"])["final_text"] == "done after 3 tool calls"
    result = modern_get()["result"]
    joined = json.loads(result["content"][0]["text"])
    assert not result.get("isError") and joined["settled"] == 2 and joined["total"] == 2
    status, doc = rpc(mcp, "tasks/get", {"taskId": "r_" + "0" * 32})
    assert doc["error"]["data"] == {"code": "task_not_found"}
