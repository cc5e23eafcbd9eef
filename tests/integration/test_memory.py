"""MemoryStore and the built-in Memory tool against a real Postgres: ops, TTLs, scopes, permissions,
limits and tenant isolation."""

from __future__ import annotations

import asyncio
import json
import secrets
from datetime import datetime, timedelta
from typing import Any

import pytest

from treadle.builtins.memory import MAX_KEY_LEN, MAX_VALUE_BYTES, MemoryTool
from treadle.config import AgentConfig, MemoryScope
from treadle.errors import ToolError
from treadle.store.memory import MemoryStore
from treadle.testing import age_memory
from treadle.tools.base import ToolContext, ToolResult

TOOL = MemoryTool()


@pytest.fixture
async def rt(open_runtime: Any) -> Any:
    runtime, _ = await open_runtime({})
    return runtime


@pytest.fixture
def store(rt: Any) -> MemoryStore:
    return rt.memory  # type: ignore[no-any-return]


@pytest.fixture
def tenant() -> str:
    return f"t_{secrets.token_hex(6)}"


def ctx(
    rt: Any,
    tenant: str,
    *,
    agent: str = "agent-a",
    user: str | None = "user-1",
    scopes: tuple[MemoryScope, ...] = ("agent", "user"),
) -> ToolContext:
    return rt.tool_context(  # type: ignore[no-any-return]
        tenant, "r_" + secrets.token_hex(4), agent, user_id=user,
        agent_config=AgentConfig(tools=["Memory"], memory_scopes=list(scopes)),
    )


async def call(c: ToolContext, **args: Any) -> dict[str, Any]:
    result = await TOOL.invoke(c, args)
    assert isinstance(result, ToolResult) and not result.is_error
    return json.loads(result.content)  # type: ignore[no-any-return]


async def test_set_get_delete(store: MemoryStore, rt: Any, tenant: str) -> None:
    c = ctx(rt, tenant)
    assert await call(c, op="get", scope="agent", key="k") == {"found": False, "key": "k", "value": None}
    assert await call(c, op="set", scope="agent", key="k", value={"a": [1, 2], "b": None}) == {
        "ok": True, "key": "k", "scope": "agent",
    }
    assert await call(c, op="get", scope="agent", key="k") == {"found": True, "key": "k", "value": {"a": [1, 2],
                                                                                                   "b": None}}
    await call(c, op="set", scope="agent", key="k", value="replaced")
    assert (await call(c, op="get", scope="agent", key="k"))["value"] == "replaced"
    await call(c, op="set", scope="agent", key="nul", value=None)
    assert await call(c, op="get", scope="agent", key="nul") == {"found": True, "key": "nul", "value": None}
    assert await call(c, op="delete", scope="agent", key="k") == {"deleted": True, "key": "k"}
    assert await call(c, op="delete", scope="agent", key="k") == {"deleted": False, "key": "k"}
    assert (await call(c, op="get", scope="agent", key="k"))["found"] is False


async def test_list_with_prefix_limit_and_order(store: MemoryStore, rt: Any, tenant: str) -> None:
    c = ctx(rt, tenant)
    for key in ("b:2", "a:1", "b:1", "b_x", "bx", "c"):
        await call(c, op="set", scope="agent", key=key, value=key.upper())
    listed = await call(c, op="list", scope="agent")
    assert [e["key"] for e in listed["entries"]] == ["a:1", "b:1", "b:2", "b_x", "bx", "c"]
    assert listed["count"] == 6 and listed["scope"] == "agent"
    entry = listed["entries"][0]
    assert entry["value"] == "A:1" and entry["expires_at"] is None
    datetime.fromisoformat(entry["updated_at"])
    assert [e["key"] for e in (await call(c, op="list", scope="agent", prefix="b:"))["entries"]] == ["b:1", "b:2"]
    # LIKE wildcards in a prefix are literal: "b_" matches "b_x" only, not "b:1"/"bx"
    assert [e["key"] for e in (await call(c, op="list", scope="agent", prefix="b_"))["entries"]] == ["b_x"]
    assert [e["key"] for e in (await call(c, op="list", scope="agent", prefix="%"))["entries"]] == []
    assert (await call(c, op="list", scope="agent", limit=2))["count"] == 2


async def test_incr(store: MemoryStore, rt: Any, tenant: str) -> None:
    c = ctx(rt, tenant)
    assert await call(c, op="incr", scope="agent", key="n") == {"key": "n", "value": 1}
    assert await call(c, op="incr", scope="agent", key="n", delta=10) == {"key": "n", "value": 11}
    assert await call(c, op="incr", scope="agent", key="n", delta=-20) == {"key": "n", "value": -9}
    assert (await call(c, op="get", scope="agent", key="n"))["value"] == -9
    await call(c, op="set", scope="agent", key="s", value="text")
    with pytest.raises(ToolError, match="not an integer"):
        await TOOL.invoke(c, {"op": "incr", "scope": "agent", "key": "s"})
    await call(c, op="set", scope="agent", key="f", value=1.5)
    with pytest.raises(ToolError, match="not an integer"):
        await TOOL.invoke(c, {"op": "incr", "scope": "agent", "key": "f"})
    assert (await call(c, op="get", scope="agent", key="s"))["value"] == "text"  # untouched
    for bad in (1.5, "2", True):
        with pytest.raises(ToolError, match="delta must be an integer"):
            await TOOL.invoke(c, {"op": "incr", "scope": "agent", "key": "n", "delta": bad})


async def test_incr_is_atomic_under_concurrency(store: MemoryStore, rt: Any, tenant: str) -> None:
    values = await asyncio.gather(*(store.incr(tenant, "agent", "a", "hits", 1, None) for _ in range(20)))
    assert sorted(values) == list(range(1, 21))  # type: ignore[type-var]
    assert await store.get(tenant, "agent", "a", "hits") == (True, 20)


async def test_ttl_sets_an_expiry_and_expired_keys_vanish(store: MemoryStore, rt: Any, tenant: str) -> None:
    c = ctx(rt, tenant)
    await call(c, op="set", scope="agent", key="temp", value=1, ttl_seconds=600)
    await call(c, op="set", scope="agent", key="keep", value=2)
    (entry,) = [e for e in (await call(c, op="list", scope="agent"))["entries"] if e["key"] == "temp"]
    expires = datetime.fromisoformat(entry["expires_at"])
    updated = datetime.fromisoformat(entry["updated_at"])
    assert timedelta(seconds=590) < expires - updated < timedelta(seconds=610)

    assert await age_memory(rt, tenant, "temp", 601) == 1  # past its 600 s
    assert (await call(c, op="get", scope="agent", key="temp"))["found"] is False
    assert [e["key"] for e in (await call(c, op="list", scope="agent"))["entries"]] == ["keep"]
    assert (await call(c, op="delete", scope="agent", key="temp"))["deleted"] is False
    # an expired counter counts from zero again, and loses its old expiry
    await call(c, op="set", scope="agent", key="ctr", value=41, ttl_seconds=600)
    assert await age_memory(rt, tenant, "ctr", 601) == 1
    assert (await call(c, op="incr", scope="agent", key="ctr"))["value"] == 1
    (ctr,) = [e for e in (await call(c, op="list", scope="agent"))["entries"] if e["key"] == "ctr"]
    assert ctr["expires_at"] is None
    # setting again revives an expired key
    await call(c, op="set", scope="agent", key="temp", value="back")
    assert (await call(c, op="get", scope="agent", key="temp"))["value"] == "back"


async def test_a_ttl_runs_out(store: MemoryStore, rt: Any, tenant: str) -> None:
    c = ctx(rt, tenant)
    await call(c, op="set", scope="agent", key="blink", value=True, ttl_seconds=60)
    assert await age_memory(rt, tenant, "blink", 59) == 1
    assert (await call(c, op="get", scope="agent", key="blink"))["found"] is True
    assert await age_memory(rt, tenant, "blink", 2) == 1  # past the minute
    assert (await call(c, op="get", scope="agent", key="blink"))["found"] is False


async def test_incr_keeps_a_live_expiry_unless_given_a_new_ttl(store: MemoryStore, rt: Any, tenant: str) -> None:
    await store.incr(tenant, "agent", "a", "k", 1, 600)
    first = (await store.list(tenant, "agent", "a", "k", 10))[0]["expires_at"]
    await store.incr(tenant, "agent", "a", "k", 1, None)
    (row,) = await store.list(tenant, "agent", "a", "k", 10)
    assert row["value"] == 2 and row["expires_at"] == first
    await store.incr(tenant, "agent", "a", "k", 1, 3600)
    (row,) = await store.list(tenant, "agent", "a", "k", 10)
    assert datetime.fromisoformat(row["expires_at"]) > datetime.fromisoformat(first) + timedelta(seconds=2000)


@pytest.mark.parametrize("ttl", [0, -1, "10", True])
async def test_bad_ttl(store: MemoryStore, rt: Any, tenant: str, ttl: Any) -> None:
    with pytest.raises(ToolError, match="ttl_seconds must be a positive number"):
        await TOOL.invoke(ctx(rt, tenant), {"op": "set", "scope": "agent", "key": "k", "value": 1,
                                               "ttl_seconds": ttl})


async def test_agent_scope_is_shared_by_runs_of_one_agent_only(store: MemoryStore, rt: Any, tenant: str) -> None:
    await call(ctx(rt, tenant, agent="writer", user="u1"), op="set", scope="agent", key="k", value="w")
    # another run of the same agent, for another user, sees it
    assert (await call(ctx(rt, tenant, agent="writer", user="u2"), op="get", scope="agent", key="k"))[
        "value"
    ] == "w"
    # another agent does not
    assert (await call(ctx(rt, tenant, agent="reader"), op="get", scope="agent", key="k"))["found"] is False


async def test_user_scope_follows_the_user_across_agents(store: MemoryStore, rt: Any, tenant: str) -> None:
    await call(ctx(rt, tenant, agent="a1", user="alice"), op="set", scope="user", key="pref", value="dark")
    got = await call(ctx(rt, tenant, agent="a2", user="alice"), op="get", scope="user", key="pref")
    assert got["value"] == "dark"
    other = await call(ctx(rt, tenant, agent="a1", user="bob"), op="get", scope="user", key="pref")
    assert other["found"] is False
    # user and agent scopes are separate namespaces even when ids collide
    await call(ctx(rt, tenant, agent="alice", user="alice"), op="set", scope="agent", key="pref", value="agent")
    got = await call(ctx(rt, tenant, agent="a1", user="alice"), op="get", scope="user", key="pref")
    assert got["value"] == "dark"


async def test_user_scope_needs_a_user(store: MemoryStore, rt: Any, tenant: str) -> None:
    with pytest.raises(ToolError, match="scope 'user' needs a run with a user_id"):
        await TOOL.invoke(ctx(rt, tenant, user=None), {"op": "get", "scope": "user", "key": "k"})


async def test_tenant_scope_needs_permission(store: MemoryStore, rt: Any, tenant: str) -> None:
    denied = ctx(rt, tenant, agent="plain")  # default memory_scopes: agent, user
    with pytest.raises(ToolError) as info:
        await TOOL.invoke(denied, {"op": "set", "scope": "tenant", "key": "k", "value": 1})
    assert "scope 'tenant' is not permitted for agent 'plain'" in str(info.value)
    assert "agent, user" in str(info.value)
    assert await store.get(tenant, "tenant", "", "k") == (False, None)  # nothing was written

    a = ctx(rt, tenant, agent="a", scopes=("tenant",))
    b = ctx(rt, tenant, agent="b", user=None, scopes=("agent", "user", "tenant"))
    await call(a, op="set", scope="tenant", key="motd", value="hello all")
    assert (await call(b, op="get", scope="tenant", key="motd"))["value"] == "hello all"
    # an agent limited to the tenant scope may not use its agent scope
    with pytest.raises(ToolError, match="scope 'agent' is not permitted"):
        await TOOL.invoke(a, {"op": "get", "scope": "agent", "key": "motd"})


async def test_no_scopes_at_all(store: MemoryStore, rt: Any, tenant: str) -> None:
    with pytest.raises(ToolError, match=r"memory_scopes: none"):
        await TOOL.invoke(ctx(rt, tenant, scopes=()), {"op": "get", "scope": "agent", "key": "k"})


async def test_value_size_limit(store: MemoryStore, rt: Any, tenant: str) -> None:
    c = ctx(rt, tenant)
    fits = "x" * (MAX_VALUE_BYTES - 2)  # the JSON string adds two quotes
    await call(c, op="set", scope="agent", key="big", value=fits)
    assert (await call(c, op="get", scope="agent", key="big"))["value"] == fits
    with pytest.raises(ToolError) as info:
        await TOOL.invoke(c, {"op": "set", "scope": "agent", "key": "big", "value": fits + "x"})
    assert f"the limit is {MAX_VALUE_BYTES}" in str(info.value)
    assert (await call(c, op="get", scope="agent", key="big"))["value"] == fits  # unchanged
    # multi-byte characters count as bytes
    with pytest.raises(ToolError, match="limit"):
        await TOOL.invoke(c, {"op": "set", "scope": "agent", "key": "u", "value": ["é" * (MAX_VALUE_BYTES // 2)]})


async def test_bad_arguments(store: MemoryStore, rt: Any, tenant: str) -> None:
    c = ctx(rt, tenant)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"op": "explode", "scope": "agent"}, "op must be one of"),
        ({"op": "get", "scope": "global", "key": "k"}, "scope must be one of"),
        ({"op": "get", "scope": "agent"}, "key is required"),
        ({"op": "get", "scope": "agent", "key": ""}, "key is required"),
        ({"op": "get", "scope": "agent", "key": 5}, "key is required"),
        ({"op": "get", "scope": "agent", "key": "k" * (MAX_KEY_LEN + 1)}, "longer than"),
        ({"op": "set", "scope": "agent", "key": "k"}, "value is required"),
        ({"op": "list", "scope": "agent", "prefix": 3}, "prefix must be a string"),
        ({"op": "list", "scope": "agent", "limit": 0}, "limit must be an integer"),
        ({"op": "list", "scope": "agent", "limit": 1001}, "limit must be an integer"),
    ]
    for args, message in cases:
        with pytest.raises(ToolError, match=message):
            await TOOL.invoke(c, args)


async def test_tenant_isolation(store: MemoryStore, rt: Any) -> None:
    t1, t2 = f"t_{secrets.token_hex(6)}", f"t_{secrets.token_hex(6)}"
    all_scopes: tuple[MemoryScope, ...] = ("agent", "user", "tenant")
    c1 = ctx(rt, t1, scopes=all_scopes)
    c2 = ctx(rt, t2, scopes=all_scopes)  # same agent name, same user id, other tenant
    for scope in all_scopes:
        await call(c1, op="set", scope=scope, key="secret", value=f"{scope} of t1")
        assert (await call(c2, op="get", scope=scope, key="secret"))["found"] is False
        assert (await call(c2, op="list", scope=scope))["entries"] == []
        assert (await call(c2, op="delete", scope=scope, key="secret"))["deleted"] is False
        assert (await call(c2, op="incr", scope=scope, key="secret"))["value"] == 1  # its own key
        assert (await call(c1, op="get", scope=scope, key="secret"))["value"] == f"{scope} of t1"


async def expiry_of(c: ToolContext, key: str) -> str | None:
    (entry,) = [e for e in (await call(c, op="list", scope="agent"))["entries"] if e["key"] == key]
    return entry["expires_at"]  # type: ignore[no-any-return]


async def test_ttl_is_loomcycles_spelling_with_its_meaning(store: MemoryStore, rt: Any, tenant: str) -> None:
    """`ttl` (seconds; 0 = no expiry, and an existing key keeps its expiry) works like loomcycle's;
    `ttl_seconds` keeps treadle's meaning; the two must agree when both are given."""
    c = ctx(rt, tenant)
    await call(c, op="set", scope="agent", key="t", value=1, ttl=600)
    first = await expiry_of(c, "t")
    assert first is not None
    expires = datetime.fromisoformat(first) - datetime.fromisoformat(
        (await store.entry(tenant, "agent", "agent-a", "t") or {})["updated_at"])
    assert timedelta(seconds=590) < expires < timedelta(seconds=610)
    await call(c, op="set", scope="agent", key="t", value=2, ttl=0)  # an update keeps the expiry
    assert await expiry_of(c, "t") == first
    assert (await call(c, op="get", scope="agent", key="t"))["value"] == 2
    await call(c, op="set", scope="agent", key="fresh", value=1, ttl=0)  # a new key: no expiry
    assert await expiry_of(c, "fresh") is None
    await call(c, op="set", scope="agent", key="t", value=3)  # neither spelling: no expiry (treadle's rule)
    assert await expiry_of(c, "t") is None
    await call(c, op="set", scope="agent", key="both", value=1, ttl=60, ttl_seconds=60)
    assert await expiry_of(c, "both") is not None
    await call(c, op="incr", scope="agent", key="ctr", ttl=600)
    assert await expiry_of(c, "ctr") is not None
    with pytest.raises(ToolError, match=r"ttl \(5\) and ttl_seconds \(6\) .* disagree"):
        await TOOL.invoke(c, {"op": "set", "scope": "agent", "key": "k", "value": 1, "ttl": 5, "ttl_seconds": 6})
    with pytest.raises(ToolError, match="disagree"):
        await TOOL.invoke(c, {"op": "set", "scope": "agent", "key": "k", "value": 1, "ttl": 0, "ttl_seconds": 6})
    for bad in (-1, "10", True):
        with pytest.raises(ToolError, match="ttl must be a number of seconds"):
            await TOOL.invoke(c, {"op": "set", "scope": "agent", "key": "k", "value": 1, "ttl": bad})
    with pytest.raises(ToolError, match=r"Memory\.get: ttl applies to set, incr and merge only"):
        await TOOL.invoke(c, {"op": "get", "scope": "agent", "key": "k", "ttl": 5})


async def test_unknown_fields_are_refused_by_name(store: MemoryStore, rt: Any, tenant: str) -> None:
    c = ctx(rt, tenant)
    for field in ("ranking", "ttl_secs"):
        with pytest.raises(ToolError, match=f"Memory: unknown field '{field}'") as info:
            await TOOL.invoke(c, {"op": "set", "scope": "agent", "key": "k", "value": 1, field: 1})
        assert info.value.code == "unknown_field"
    with pytest.raises(ToolError, match="rank applies to search only"):  # loomcycle's search field, on set
        await TOOL.invoke(c, {"op": "set", "scope": "agent", "key": "k", "value": 1, "rank": {}})
    assert (await call(c, op="get", scope="agent", key="k"))["found"] is False  # nothing was written
    with pytest.raises(ToolError, match="unknown fields 'dedupe', 'source'"):
        await TOOL.invoke(c, {"op": "search", "scope": "agent", "query": "x", "dedupe": {}, "source": []})


async def test_every_documented_field_is_accepted(store: MemoryStore, rt: Any, tenant: str) -> None:
    c = ctx(rt, tenant)
    samples = {"op": "set", "scope": "agent", "key": "k", "value": 1, "ttl_seconds": 5, "ttl": 5, "embed": False,
               "embed_text": None, "query": "q", "k": 3, "top_k": 3, "min_score": 0.1, "recency_weight": 0.5,
               "recency_half_life_hours": 2, "include_values": True, "prefix": "", "limit": 5, "delta": 1,
               "statement": "SELECT 1", "args": [], "timeout_ms": 100,  # the sql_* ops' (tests/knowledge)
               "path": "/notes/k",  # set/get through the Path tree (tests/knowledge)
               # loomcycle's search blocks, add and recall (tests/knowledge/test_memory_search_complete.py)
               "rank": {}, "dedup": {}, "sources": ["notes"], "messages": [], "infer": False, "metadata": {},
               "threshold": 0.5, "provenance": {},
               # the consolidation ops' (tests/loomcycle/test_memory_bundle.py)
               "lease_ttl_ms": 1000, "from_pending": False, "session_id": "s", "completed_at": None, "ids": []}
    assert set(samples) == set(TOOL.input_schema["properties"])
    for field, sample in samples.items():
        for op in ("set", "search", "list", "incr"):
            args = {"op": op, "scope": "agent", "key": "k", "value": 1, "query": "q", field: sample}
            try:
                await TOOL.invoke(c, args)
            except ToolError as exc:
                assert exc.code != "unknown_field", (field, op, exc.message)
