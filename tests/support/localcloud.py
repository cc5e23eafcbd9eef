"""Constants and helpers shared by tests/cloud's conftest and test modules: the agents of the
local cloud's treadle.yaml, its API token, and a database URL's parts."""

from __future__ import annotations

from typing import Any

from psycopg.conninfo import conninfo_to_dict

AGENTS: dict[str, Any] = {
    "calc": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 3}},
    "slow": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 2, "latency_ms": 700}},
    "echo": {"model": "echo"},
    "glacial": {"model": "echo", "mock": {"latency_ms": 4000}},  # a model call longer than a short invocation
    "shopper": {"model": "script", "tools": [],
                "mock": {"script": [{"tool": "lookup_order", "input": {"order_id": "A-17"}}, {"text": "found it"}]}},
    # sessions and compaction (tests/cloud/test_cloud_conversations.py)
    # a run parked on its question (tests/cloud/test_cloud_snapshots.py)
    "asker": {"model": "script", "tools": ["Interruption"], "mock": {"script": [
        {"tool": "Interruption", "input": {"op": "ask", "question": "proceed?", "options": ["yes", "no"]}},
        {"text": "asked"}]}},
    "convo": {"model": "script", "mock": {"script": [{"text": "one"}, {"text": "two"}, {"text": "three"}]}},
    # the Path tree and Documents (tests/cloud/test_cloud_knowledge.py)
    "librarian": {"model": "script", "tools": ["Document", "Path"], "mock": {"script": [
        {"tool": "Document", "input": {"op": "create_document", "scope": "agent", "title": "Cloud doc",
                                       "path": "/docs/cloud"}},
        {"tool": "Path", "input": {"op": "ls", "path": "/docs"}},
        {"text": "filed"}]}},
    # resident sub-agents (tests/cloud/test_cloud_residents.py): opens two, sends to one, then asks
    "holder": {"model": "script", "tools": ["Agent", "Interruption"], "mock": {"script": [
        {"tool": "Agent", "input": {"op": "open", "name": "echo", "prompt": "hello", "idle_ttl_seconds": 60}},
        {"tool": "Agent", "input": {"op": "open", "name": "echo", "prompt": "ping", "idle_ttl_seconds": 600}},
        {"tool": "Agent", "input": {"op": "send", "child_run_id": "$result.child_run_id", "prompt": "pong"}},
        {"tool": "Interruption", "input": {"op": "ask", "question": "keep them?"}},
        {"text": "bye"}]}},
    "long": {"model": "tool-caller", "tools": ["Memory"], "max_iterations": 14,
             "mock": {"tool_calls": 40, "context_window": 300},
             "compaction": {"enabled": True, "autocompact_at_pct": 50, "keep_last_n": 2}},
}
API_TOKEN = "test-token-0123456789"
#: the agents the local cloud serves over A2A (tests/cloud/test_a2a_function.py)
A2A_CARDS: dict[str, Any] = {"main": {"name": "cloud agents", "exposed_agents": [{"agent_name": "echo"}]}}


def db_host_parts(url: str) -> dict[str, str]:
    return {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
