"""treadle's MCP server at /v1/_mcp, served by the sidecar app on a real loopback uvicorn server
and driven by the official `mcp` SDK client over Streamable HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from tests.support.mcp import TOKEN, payload


def mcp_client(base_url: str, http: httpx2.AsyncClient) -> Client:
    return Client(streamable_http_client(f"{base_url}/v1/_mcp", http_client=http))


@asynccontextmanager
async def connect(base_url: str) -> AsyncIterator[Client]:
    """An SDK client session (entered and left in the test's own task: anyio's cancel scopes
    cannot span a fixture's setup and teardown)."""
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http,
                mcp_client(base_url, http) as c):
        yield c


async def test_lists_loomcycle_meta_tools(base_url: str) -> None:
    async with connect(base_url) as client:
        listed = await client.list_tools()
        names = {t.name for t in listed.tools}
        assert names >= {
            "spawn_run", "spawn_runs", "get_run", "list_runs", "cancel_run", "get_transcript", "steer_run",
            "send_input", "list_interrupts", "resolve_interrupt", "memory", "publish_channel", "peek_channel",
            "agentdef", "skilldef", "scheduledef", "webhookdef", "whoami",
        }
        spawn = next(t for t in listed.tools if t.name == "spawn_runs")
        assert {"spawns", "runs"} <= set(spawn.input_schema["properties"])
        who = payload(await client.call_tool("whoami", {}))
        assert who["tenant_id"] == "default" and who["subject"] == "operator"


async def test_spawn_runs_joins_ten_children_index_aligned(base_url: str) -> None:
    async with connect(base_url) as client:
        runs = [{"agent": "echo", "prompt": f"child number {i}"} for i in range(10)]
        runs[3] = {"agent": "no-such-agent", "prompt": "x"}  # one child cannot start: its slot says so
        out = payload(await client.call_tool("spawn_runs", {"runs": runs, "mode": "join", "timeout_ms": 60_000}))
        assert out["total"] == 10 and out["timed_out"] is False
        results = out["results"]
        assert [r["index"] for r in results] == list(range(10))
        assert results[3]["ok"] is False and results[3]["error"]["code"] == "unknown_agent"
        assert "run_id" not in results[3]
        for i, r in enumerate(results):
            if i == 3:
                continue
            assert r["ok"] and r["settled"] and r["status"] == "completed", r
            assert f"child number {i}" in r["final_text"]
        assert len({r["run_id"] for i, r in enumerate(results) if i != 3}) == 9


async def test_spawn_runs_returns_partial_results_at_its_timeout_then_cancel(base_url: str) -> None:
    async with connect(base_url) as client:
        out = payload(await client.call_tool("spawn_runs", {
            "runs": [{"agent": "echo", "prompt": "quick"}, {"agent": "forever", "prompt": "go"}], "timeout_ms": 1500,
        }))
        quick, slow = out["results"]
        assert out["timed_out"] is True and out["settled"] == 1
        assert quick["settled"] and quick["status"] == "completed"
        assert not slow["settled"] and slow["status"] in ("queued", "running", "waiting")
        cancelled = payload(await client.call_tool("cancel_run", {"run_id": slow["run_id"], "reason": "enough"}))
        assert cancelled["run_id"] == slow["run_id"] and cancelled["cancel_requested"] is True
        final = payload(await client.call_tool("spawn_run", {"agent": "echo", "prompt": "after"}))
        assert final["status"] == "completed"
        # the cancelled run settles as cancelled (get_run reads the same store as GET /v1/runs/{id})
        run = payload(await client.call_tool("get_run", {"run_id": slow["run_id"], "wait_ms": 60_000}))
        assert run["status"] == "cancelled"


async def test_transcript_pages(base_url: str) -> None:
    async with connect(base_url) as client:
        run = payload(await client.call_tool("spawn_run", {"agent": "echo", "prompt": "page me"}))
        first = payload(await client.call_tool("get_transcript", {"run_id": run["run_id"], "limit": 1}))
        assert len(first["events"]) == 1 and first["next_from_seq"] == first["events"][0]["seq"]
        rest = payload(await client.call_tool("get_transcript", {"run_id": run["run_id"],
                                                                  "from_seq": first["next_from_seq"]}))
        assert rest["events"][0]["seq"] == first["next_from_seq"] + 1
        assert rest["events"][-1]["type"] == "done" and rest["next_from_seq"] is None


async def test_tool_errors_carry_treadle_codes(base_url: str) -> None:
    async with connect(base_url) as client:
        missing = await client.call_tool("get_run", {"run_id": "r_doesnotexist"})
        assert missing.is_error and payload(missing)["code"] == "run_not_found"
        bad = await client.call_tool("spawn_runs", {"runs": [{"agent": "echo", "prompt": "x"}] * 33})
        assert bad.is_error and payload(bad)["code"] == "validation_error"
        unknown = await client.call_tool("no_such_tool", {})
        assert unknown.is_error and payload(unknown)["code"] == "unknown_tool"
        refused = await client.call_tool("agentdef", {"op": "get", "name": "nobody"})
        assert refused.is_error and payload(refused)["code"] in ("not_found", "tool_refused")


async def test_bearer_is_required(base_url: str) -> None:
    async with httpx.AsyncClient() as http:
        resp = await http.post(f"{base_url}/v1/_mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                               headers={"Accept": "application/json, text/event-stream"})
    assert resp.status_code == 401 and resp.json()["code"] == "unauthorized"
    auth = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(headers=auth) as http:
        get = await http.get(f"{base_url}/v1/_mcp")  # stateless: no stream to open
        assert (get.status_code, get.json()["code"], get.headers["allow"]) == (405, "method_not_allowed", "POST")
        bad = await http.post(f"{base_url}/v1/_mcp", content=b"{not json", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["code"] == "bad_request"  # treadle's shape …
        assert bad.json()["details"]["jsonrpc"]["code"] == -32700  # … with the JSON-RPC error inside
    async with httpx2.AsyncClient(headers={"Authorization": "Bearer wrong"}) as http:
        with pytest.raises(BaseExceptionGroup) as refused:
            async with mcp_client(base_url, http) as c:
                await c.list_tools()
    assert refused.group_contains(MCPError, depth=None)  # the SDK's error for a refused HTTP request


async def test_teamdef_meta_tool_authors_and_runs_a_team(base_url: str) -> None:
    graph = {"entry": "a", "states": [{"state": "a", "handler": {"kind": "agent", "agent": "echo"}},
                                      {"state": "b", "handler": {"kind": "terminal"}}],
             "transitions": [{"from": "a", "to": "b", "on": "success"}]}
    async with connect(base_url) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert "render_diagram" in listed["teamdef"].input_schema["properties"]["op"]["enum"]
        created = payload(await client.call_tool("teamdef", {"op": "create", "name": "mcp-team", "overlay": graph}))
        assert created["version"] == 1
        diagram = payload(await client.call_tool("teamdef", {"op": "render_diagram", "name": "mcp-team"}))
        assert diagram["diagram"].startswith("stateDiagram-v2")
        ran = payload(await client.call_tool("teamdef", {"op": "run", "name": "mcp-team", "input": "hello team"}))
        assert ran["status"] == "completed" and ran["final_output"] == "hello team", ran


async def test_the_mcp_path_serves_the_same_server(base_url: str) -> None:
    """`/mcp`: the MCP Inspector rewrites any HTTP URL whose path does not end in /mcp."""
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http,
                Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as c):
        names = {t.name for t in (await c.list_tools()).tools}
        assert {"spawn_run", "spawn_runs"} <= names
        out = payload(await c.call_tool("spawn_run", {"agent": "echo", "prompt": "via /mcp"}))
        assert out["status"] == "completed" and "via /mcp" in out["final_text"]
    async with httpx.AsyncClient() as anon:
        assert (await anon.post(f"{base_url}/mcp", json={})).status_code == 401


async def test_loomcycle_shaped_spawn_runs_get_run_and_cancel_run(base_url: str) -> None:
    """loomcycle's argument schemas: spawn_runs wants `spawns`; get_run / cancel_run take `agent_id`."""
    seg = [{"role": "user", "content": [{"type": "trusted-text", "text": "loomcycle shaped"}]}]
    async with connect(base_url) as client:
        out = payload(await client.call_tool("spawn_runs", {
            "spawns": [{"agent": "echo", "segments": seg, "agent_id": "lc-echo-1"},
                       {"agent": "no-such-agent", "segments": seg}],
            "timeout_ms": 60_000}))
        ok, refused = out["results"]
        assert ok["agent_id"] == "lc-echo-1" and ok["status"] == "completed"
        assert "loomcycle shaped" in ok["final_text"]
        assert refused["status"] == "failed" and refused["code"] == "unknown_agent"
        state = payload(await client.call_tool("get_run", {"agent_id": "lc-echo-1"}))
        assert state["agent_id"] == "lc-echo-1" and state["run_id"] == ok["run_id"]
        live = payload(await client.call_tool("spawn_run", {"agent": "forever", "prompt": "go", "timeout_ms": 0}))
        [started] = payload(await client.call_tool("spawn_runs", {
            "spawns": [{"agent": "forever", "prompt": "go", "agent_id": "lc-forever-1"}], "timeout_ms": 0}))["results"]
        cancelled = payload(await client.call_tool("cancel_run", {"agent_id": "lc-forever-1", "reason": "enough"}))
        assert cancelled["agent_id"] == "lc-forever-1"
        payload(await client.call_tool("cancel_run", {"run_id": live["run_id"]}))
        both = await client.call_tool("spawn_runs", {"spawns": [{"agent": "echo"}], "runs": [{"agent": "echo"}]})
        assert both.is_error
        missing = await client.call_tool("get_run", {"agent_id": "lc-nobody"})
        assert missing.is_error and isinstance(missing.content[0], TextContent)
        assert "agent_not_found" in missing.content[0].text
        assert started["agent_id"] == "lc-forever-1"


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy", "auto"])
async def test_both_protocol_eras_list_and_spawn_at_the_mcp_path(base_url: str, mode: str) -> None:
    """MCP 2026-07-28 (stateless: no handshake, each request carries its version; `auto` probes
    server/discover) and the 2025-11-25 initialize handshake (`legacy`), loomcycle-shaped calls."""
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http,
                Client(streamable_http_client(f"{base_url}/mcp", http_client=http), mode=mode) as c):
        expected = "2025-11-25" if mode == "legacy" else "2026-07-28"
        assert c.protocol_version == expected
        assert "spawn_runs" in {t.name for t in (await c.list_tools()).tools}
        seg = [{"role": "user", "content": [{"type": "trusted-text", "text": f"era {mode}"}]}]
        out = payload(await c.call_tool("spawn_runs", {"spawns": [{"agent": "echo", "segments": seg}],
                                                       "timeout_ms": 60_000}))
        assert out["results"][0]["status"] == "completed" and f"era {mode}" in out["results"][0]["final_text"]
