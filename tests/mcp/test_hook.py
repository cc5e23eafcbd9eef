"""The ScheduleDef on_complete hook `mcp.call`: after a completed fire, the named tool of an MCP
server (a FastMCP server on a loopback port) is called with the hook's args; a failing call is
recorded with a stable code."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from mcp.server.mcpserver import MCPServer

from tests.support.db import TEST_HOME
from tests.support.mcp_servers import serve_http
from treadle.testing import open_test_runtime

TENANT = "default"


def recorder(calls: list[dict[str, object]], release: asyncio.Event | None = None) -> MCPServer:
    server = MCPServer("notes")

    @server.tool()
    async def block() -> str:
        """Answers only once the test releases it."""
        assert release is not None
        await release.wait()
        return "released"

    @server.tool()
    def record(note: str, n: int) -> str:
        """Record a note."""
        calls.append({"note": note, "n": n})
        return f"recorded {note}"

    @server.tool()
    def fail() -> str:
        """Always fails."""
        raise ValueError("nope")

    return server


async def test_mcp_call_hook_runs_after_a_completed_fire(migrated_db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREADLE_HTTP_ALLOWED_HOSTS", "127.0.0.1")
    monkeypatch.setenv("TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST", "127.0.0.1")
    calls: list[dict[str, object]] = []
    async with serve_http(recorder(calls)) as url, open_test_runtime(
        {"echo": {"model": "echo"}}, database_url=migrated_db_url, home=TEST_HOME,
        config={"mcp_servers": {"notes": {"url": url}}},
    ) as (rt, disp):
        svc = rt.triggers.schedules
        hooks = [{"kind": "mcp.call", "server": "notes", "tool": "record", "args": {"note": "nightly", "n": 3}},
                 {"kind": "mcp.call", "server": "notes", "tool": "fail"},
                 {"kind": "mcp.call", "server": "nowhere", "tool": "x"}]
        await svc.family.dispatch(TENANT, {"op": "create", "name": "nightly", "overlay": {
            "agent": "echo", "schedule": "* * * * *", "prompt": "tick", "on_complete": hooks}})
        st = await svc.resolve(TENANT, "nightly")
        assert st.next_fire_at is not None
        await svc.firing.tick(st.next_fire_at + timedelta(seconds=1))
        await disp.drain()
        assert await rt.triggers.hooks.run_once() == 1
        assert calls == [{"note": "nightly", "n": 3}]
        [fire] = await svc.store.recent_fires(TENANT, st.schedule_id)
        ok, failed, unknown = fire["hooks_result"]["results"]
        assert ok["ok"] and ok["text"] == "recorded nightly" and ok["server"] == "notes"
        assert not failed["ok"] and failed["code"] == "mcp_tool_error" and "notes/fail" in failed["error"]
        assert not unknown["ok"] and unknown["code"] == "mcp_refused"
        assert fire["hooks_status"] == "failed"


async def test_mcp_call_hooks_are_validated(migrated_db_url: str) -> None:
    async with open_test_runtime({"echo": {"model": "echo"}}, database_url=migrated_db_url, home=TEST_HOME) as (rt, _):
        from treadle.errors import DefRefused

        family = rt.triggers.schedules.family
        for hook, needle in (({"kind": "mcp.call", "server": "s"}, "tool"),
                             ({"kind": "mcp.call", "tool": "t"}, "server"),
                             ({"kind": "mcp.call", "server": "a__b", "tool": "t"}, "server")):
            with pytest.raises(DefRefused, match=needle):
                await family.dispatch(TENANT, {"op": "create", "name": "bad", "overlay": {
                    "agent": "echo", "schedule": "* * * * *", "prompt": "x", "on_complete": [hook]}})


async def test_a_call_past_the_servers_timeout_is_recorded_as_mcp_timeout(
    migrated_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TREADLE_HTTP_ALLOWED_HOSTS", "127.0.0.1")
    monkeypatch.setenv("TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST", "127.0.0.1")
    release = asyncio.Event()  # never set before the hook returns: only the timeout can end the call
    async with serve_http(recorder([], release)) as url, open_test_runtime(
        {"echo": {"model": "echo"}}, database_url=migrated_db_url, home=TEST_HOME,
        config={"mcp_servers": {"notes": {"url": url, "timeout_seconds": 0.5}}},
    ) as (rt, disp):
        svc = rt.triggers.schedules
        await svc.family.dispatch(TENANT, {"op": "create", "name": "slow", "overlay": {
            "agent": "echo", "schedule": "* * * * *", "prompt": "tick",
            "on_complete": [{"kind": "mcp.call", "server": "notes", "tool": "block"}]}})
        st = await svc.resolve(TENANT, "slow")
        assert st.next_fire_at is not None
        await svc.firing.tick(st.next_fire_at + timedelta(seconds=1))
        await disp.drain()
        assert await rt.triggers.hooks.run_once() == 1
        [fire] = await svc.store.recent_fires(TENANT, st.schedule_id)
        [result] = fire["hooks_result"]["results"]
        assert not result["ok"] and result["code"] == "mcp_timeout", result
        release.set()
