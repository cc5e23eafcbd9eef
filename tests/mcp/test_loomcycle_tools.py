"""loomcycle's channel, hook and run-state meta-tools (api/mcp/loomtools.py) under its names and
argument shapes, driven by the official `mcp` SDK client over Streamable HTTP."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from tests.mcp.test_server_http import connect
from tests.support.mcp import call, payload, refused

NEW_TOOLS = {"channel", "channeldef", "subscribe_channel", "ack_channel", "register_hook", "list_hooks",
             "delete_hook", "stream_user_run_states"}


async def test_the_tools_are_listed_with_loomcycles_arguments(base_url: str) -> None:
    async with connect(base_url) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) >= NEW_TOOLS
        assert set(tools["subscribe_channel"].input_schema["required"]) == {"channel", "scope"}
        assert set(tools["register_hook"].input_schema["required"]) == {"owner", "name", "phase", "callback_url"}


async def test_channels_global_and_per_user(base_url: str) -> None:
    news, inbox = f"lc-news-{secrets.token_hex(3)}", f"lc-inbox-{secrets.token_hex(3)}"
    async with connect(base_url) as client:
        await call(client, "channeldef", {"op": "create", "name": news, "description": "news"})
        await call(client, "channeldef", {"op": "create", "name": inbox, "scope": "user"})
        assert (await call(client, "channeldef", {"op": "update", "name": news, "description": "later"}))[
            "description"] == "later"
        await call(client, "channel", {"op": "publish", "channel": news, "payload": {"n": 1}})
        got = await call(client, "subscribe_channel", {"channel": news, "scope": "global"})
        assert [m["value"] for m in got["messages"]] == [{"n": 1}] and got["next_cursor"]
        assert (await call(client, "ack_channel", {"channel": news, "scope": "global",
                                                   "cursor": got["next_cursor"]}))["ok"] is True
        assert (await call(client, "subscribe_channel", {"channel": news, "scope": "global"}))["messages"] == []

        await call(client, "channel", {"op": "publish", "channel": inbox, "scope": "user", "scope_id": "ada",
                                       "payload": "hi ada"})
        peeked = await call(client, "channel", {"op": "peek", "channel": inbox, "scope": "user", "scope_id": "ada"})
        assert [m["value"] for m in peeked["messages"]] == ["hi ada"]
        assert await refused(client, "subscribe_channel", {"channel": inbox, "scope": "user"}) == "validation_error"
        assert await refused(client, "subscribe_channel", {"channel": inbox, "scope": "global"}) == \
            "channel_scope_invalid"
        assert await refused(client, "subscribe_channel", {"channel": news, "scope": "user", "scope_id": "ada"}) == \
            "channel_scope_invalid"
        bob = await call(client, "subscribe_channel", {"channel": inbox, "scope": "user", "scope_id": "bob"})
        assert bob["messages"] == []  # ada's message is in ada's scope only
        assert await refused(client, "channel", {"op": "ack", "channel": news, "payload": 1}) == "validation_error"

        # loomcycle's audit attribution is recorded nowhere here: refused by name, not dropped
        assert await refused(client, "channeldef", {"op": "purge", "name": inbox, "resolved_by": "me"}) == \
            "validation_error"
        assert (await call(client, "channeldef", {"op": "purge", "name": inbox}))["purged"] == 1
        await call(client, "channeldef", {"op": "delete", "name": news})
        assert await refused(client, "subscribe_channel", {"channel": news, "scope": "global"}) == "not_found"


async def test_hooks_register_replace_list_delete(base_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREADLE_HOOKS_SECRET", "hook-secret-" + secrets.token_hex(8))
    owner = "app-" + secrets.token_hex(3)
    hook = {"owner": owner, "name": "audit", "phase": "pre", "callback_url": "http://127.0.0.1:9/hook"}
    async with connect(base_url) as client:
        first = await call(client, "register_hook", hook)
        second = await call(client, "register_hook", {**hook, "phase": "post", "timeout_ms": 0})
        assert first["id"] != second["id"]
        mine = [h for h in (await call(client, "list_hooks", {}))["hooks"] if h["owner"] == owner]
        assert [(h["id"], h["phase"], h["fail_mode"], h["timeout_ms"]) for h in mine] == [
            (second["id"], "post", "open", 5000)]  # replaced; loomcycle's defaults
        assert await call(client, "delete_hook", {"id": second["id"]}) == {"deleted": second["id"]}
        assert await refused(client, "delete_hook", {"id": second["id"]}) == "hook_not_found"


async def test_stream_user_run_states_collects_transitions(base_url: str) -> None:
    user = "u-" + secrets.token_hex(4)
    async with connect(base_url) as watcher, connect(base_url) as starter:
        stream = asyncio.ensure_future(watcher.call_tool("stream_user_run_states", {
            "user_id": user, "statuses": ["completed"], "agent": "echo", "max_events": 2, "timeout_ms": 60_000}))
        started = 0
        while not stream.done():  # runs keep ending until the call has seen two (it sees those after it began)
            await call(starter, "spawn_run", {"agent": "echo", "prompt": "hi", "user_id": user})
            started += 1
            await asyncio.wait([stream], timeout=0.2)
        out = payload(stream.result())
        assert out["count"] == 2 and started >= 2
        assert {(e["user_id"], e["agent"], e["status"]) for e in out["events"]} == {(user, "echo", "completed")}


async def test_volumedef_and_operatortokendef_take_their_op_input(base_url: str) -> None:
    async with connect(base_url) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"volumedef", "operatortokendef"} <= names
        assert "defs" in await call(client, "volumedef", {"op": "list"})
        # (no token is minted: the server's database is shared, and one valid token ends open mode for every test)
        assert "defs" in await call(client, "operatortokendef", {"op": "list"})
        assert await refused(client, "operatortokendef", {"op": "explode"}) in ("tool_refused", "validation_error")


async def test_path_and_document_take_their_tools_input(base_url: str) -> None:
    """Issue 41: loomcycle's `path` and `document` meta-tools, on the caller's own store."""
    name = f"/mcp/d{secrets.token_hex(3)}"
    async with connect(base_url) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "create_chunk" in tools["document"].input_schema["properties"]["op"]["enum"]
        assert tools["path"].input_schema["properties"]["op"]["enum"] == ["resolve", "ls", "stat", "mkdir", "mv", "rm"]
        made = await call(client, "document", {"op": "create_document", "title": "Via MCP", "path": name})
        chunk = await call(client, "document", {"op": "create_chunk", "document_id": made["document_id"],
                                                "title": "c", "body": "one"})
        assert (await call(client, "document", {"op": "update_chunk", "id": chunk["id"], "revision": 1,
                                                "body": "two"}))["revision"] == 2
        assert await refused(client, "document", {"op": "update_chunk", "id": chunk["id"], "revision": 1,
                                                  "body": "lost"}) == "tool_refused"
        listed = await call(client, "path", {"op": "ls", "scope": "user", "path": "/mcp"})
        assert name in [e["full_path"] for e in listed["entries"]]
