"""loomcycle's conversation meta-tools (api/mcp/sessiontools.py) — `history`, `compact_run` (by
loomcycle's agent_id or treadle's run_id) and `replay_session` — driven by the official `mcp` SDK
client over Streamable HTTP against a served treadle."""

from __future__ import annotations

import secrets

from tests.mcp.test_server_http import connect
from tests.support.mcp import call, refused


async def test_history_compact_run_and_replay_over_mcp(base_url: str) -> None:
    agent_id = "lc-chat-" + secrets.token_hex(3)
    async with connect(base_url) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert {"history", "compact_run", "replay_session"} <= set(tools)
        assert "agent_id" in tools["compact_run"].input_schema["properties"]
        assert "op" in tools["history"].input_schema["required"]

        first = await call(
            client, "spawn_run", {"agent": "chatty", "prompt": "the lake is cold in May", "user_id": "ada"}
        )
        sid = first["session_id"]
        second = await call(
            client,
            "spawn_run",
            {"agent": "chatty", "prompt": "and warm in August", "session_id": sid, "agent_id": agent_id},
        )
        assert second["status"] == "completed" and second["session_id"] == sid, second

        listed = await call(client, "history", {"op": "list", "scope": "tenant", "limit": 100})
        assert sid in [c["id"] for c in listed["chats"]]
        assert (await call(client, "history", {"op": "rename", "session_id": sid, "title": "Lake"}))["title"] == "Lake"
        recapped = await call(client, "history", {"op": "recap", "session_id": sid})
        assert "warm in August" in recapped["summary"] and recapped["chat"]["summary"] == recapped["summary"]
        assert await refused(client, "history", {"op": "get", "session_id": "s_nope"}) == "session_not_found"
        assert await refused(client, "history", {"op": "list", "colour": "red"}) == "validation_error"

        # the second run ended with 4 messages in its history: keep_last_n 2 leaves 2 to summarize
        compacted = await call(client, "compact_run", {"agent_id": agent_id, "reason": "tidy"})
        assert compacted["applied"] == "marker" and compacted["run_id"] == second["run_id"], compacted
        noop = await call(client, "compact_run", {"run_id": first["run_id"]})
        assert noop["applied"] == "noop"
        assert await refused(client, "compact_run", {}) == "validation_error"
        assert await refused(client, "compact_run", {"agent_id": "lc-nobody"}) == "agent_not_found"

        seeded = await call(client, "replay_session", {"session_id": sid, "agent": "echo"})
        assert seeded["events_copied"] == 5 and not seeded["compacted"], seeded  # 4 turns + the compaction
        got = await call(client, "history", {"op": "get", "session_id": seeded["new_session_id"]})
        assert got["agent"] == "echo" and got["events"][-2]["type"] == "context_compaction"
        assert await refused(client, "replay_session", {"session_id": sid, "agent": "nobody"}) == "agent_gone"
