"""The code-js provider's replay on its own: frontier, replay, divergence, determinism (loomcycle's
seed and clock rules), bindings (only the agent's tools; Memory/Channel/Agent shapes)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from treadle.domain.content import Message, TextBlock, ToolResultBlock, ToolUseBlock
from treadle.errors import ProviderError
from treadle.providers.base import ModelRequest, RunInfo, ToolSpec
from treadle.providers.codejs import (
    FIXED_EPOCH_MS,
    FIXED_SEED,
    CodeAgentSettings,
    CodeJsProvider,
    fnv1a32,
)

pytest.importorskip("quickjs")


def provider(**kw: Any) -> CodeJsProvider:
    return CodeJsProvider(CodeAgentSettings(enabled=True, **kw))


def request(code: str, tools: list[str], messages: list[Message], **opts: Any) -> ModelRequest:
    return ModelRequest(
        model="loomcycle/code-js", system="", messages=messages,
        tools=[ToolSpec(t, "", {"type": "object"}) for t in tools],
        run=RunInfo("run-1", "agent-a", 0),
        options={"code_agent": {"code_body": code, **opts}},
    )


def exchange(messages: list[Message], use: ToolUseBlock, result: str, is_error: bool = False) -> None:
    messages.append(Message("assistant", [use]))
    messages.append(Message("user", [ToolResultBlock(use.id, result, is_error)]))


CODE = """
function run(input) {
  var a = Memory.get({scope: 'agent', key: 'k'});
  var b = Channel.publish({channel: 'c', value: a.value});
  var c = Agent.spawn({name: 'helper', prompt: input.prompt});
  var d = WebFetch({url: 'https://example.com'});
  return {final_text: [a.value, b.ok, c.answer, d].join('|')};
}
"""
TOOLS = ["Memory", "Channel", "Agent", "WebFetch"]


async def test_each_call_is_a_frontier_then_a_replay_to_the_final_text() -> None:
    p = provider()
    msgs = [Message("user", [TextBlock("hello")])]
    results = ['{"value": 7}', '{"ok": true}', '{"answer": "hi"}', '{"raw": 1}']
    expect = [("Memory", {"op": "get", "scope": "agent", "key": "k"}),
              ("Channel", {"op": "publish", "channel": "c", "value": 7}),
              ("Agent", {"name": "helper", "prompt": "hello"}),
              ("WebFetch", {"url": "https://example.com"})]
    for (name, tool_input), result in zip(expect, results, strict=True):
        resp = await p.call(request(CODE, TOOLS, msgs))
        assert resp.stop_reason == "tool_use"
        [use] = resp.content
        assert isinstance(use, ToolUseBlock) and (use.name, use.input) == (name, tool_input)
        exchange(msgs, use, result)
    resp = await p.call(request(CODE, TOOLS, msgs))
    assert resp.stop_reason == "end_turn"
    assert [b.text for b in resp.content if isinstance(b, TextBlock)] == ['7|true|hi|{"raw": 1}']  # flat: raw


async def test_an_unbound_tool_is_a_reference_error() -> None:
    with pytest.raises(ProviderError) as exc:
        await provider().call(request(CODE, ["WebFetch"], [Message("user", [TextBlock("x")])]))
    assert exc.value.code == "code_agent_threw" and "Memory" in exc.value.message


async def test_a_different_input_on_replay_is_a_divergence() -> None:
    msgs = [Message("user", [TextBlock("x")])]
    exchange(msgs, ToolUseBlock("t1", "WebFetch", {"url": "https://a"}), "ok")
    code = "function run(i) { return WebFetch({url: 'https://b'}); }"
    with pytest.raises(ProviderError) as exc:
        await provider().call(request(code, ["WebFetch"], msgs))
    assert exc.value.code == "code_agent_replay_divergence"
    msgs2 = [Message("user", [TextBlock("x")])]
    exchange(msgs2, ToolUseBlock("t1", "WebFetch", {"b": 2, "a": 1}), "ok")  # key order is not a divergence
    code2 = "function run(i) { return WebFetch({a: 1, b: 2}); }"
    resp = await provider().call(request(code2, ["WebFetch"], msgs2))
    assert resp.stop_reason == "end_turn"


async def test_random_and_clock_follow_loomcycles_rules() -> None:
    code = "function run(i) { return [Math.random(), Date.now(), new Date().getTime()].join(','); }"
    resp = await provider(deterministic=True).call(request(code, [], [Message("user", [TextBlock("x")])]))
    seed = (FIXED_SEED * 1103515245 + 12345) % 2**32
    want = f"{(seed & 0x7FFFFFFF) / 0x7FFFFFFF!r},{FIXED_EPOCH_MS},{FIXED_EPOCH_MS + 1}"
    [text] = resp.content
    assert isinstance(text, TextBlock)
    assert text.text.split(",")[1:] == want.split(",")[1:]
    assert abs(float(text.text.split(",")[0]) - (seed & 0x7FFFFFFF) / 0x7FFFFFFF) < 1e-15
    # per run: FNV-1a-32 of "<run id>|<agent>", anchor = the run's start
    started = int(time.time() * 1000)
    resp2 = await provider().call(request(code, [], [Message("user", [TextBlock("x")])], started_ms=started))
    seed2 = (fnv1a32("run-1|agent-a") * 1103515245 + 12345) % 2**32
    [t2] = resp2.content
    assert isinstance(t2, TextBlock)
    r, now, _ = t2.text.split(",")
    assert abs(float(r) - (seed2 & 0x7FFFFFFF) / 0x7FFFFFFF) < 1e-15 and now == str(started)
    assert fnv1a32("") == 0x811C9DC5 and fnv1a32("a") == 0xE40C292C


async def test_input_keys_are_sorted_and_carry_metadata() -> None:
    code = "function run(i) { return JSON.stringify(i); }"
    resp = await provider().call(request(code, [], [Message("user", [TextBlock("p")])],
                                         metadata={"z": 1, "a": 2}, user_id="u1"))
    [t] = resp.content
    assert isinstance(t, TextBlock)
    assert t.text == '{"metadata":{"a":2,"agent":"agent-a","user_id":"u1","z":1},"prompt":"p"}'


async def test_the_code_is_read_from_the_root_when_not_inline(tmp_path: Any) -> None:
    (tmp_path / "agent-a").mkdir()
    (tmp_path / "agent-a" / "index.js").write_text("function run(i) { return 'from disk'; }")
    p = provider(root=str(tmp_path))
    req = request("", [], [Message("user", [TextBlock("x")])])
    req.options["code_agent"]["code_body"] = None
    resp = await p.call(req)
    assert [b.text for b in resp.content if isinstance(b, TextBlock)] == ["from disk"]
    with pytest.raises(ProviderError) as exc:
        await provider(root=str(tmp_path / "none")).call(req)
    assert exc.value.code == "code_agent_load"


async def test_a_spinning_step_ends_on_its_limit_and_the_event_loop_keeps_running() -> None:
    import asyncio

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        with pytest.raises(ProviderError) as exc:
            await provider(step_timeout_seconds=0.5).call(
                request("function run(i) { while (true) {} }", [], [Message("user", [TextBlock("x")])]))
    finally:
        task.cancel()
    assert exc.value.code == "code_agent_timeout"
    assert ticks >= 10  # the loop was not held while the code spun


async def test_programs_are_cached_by_content_hash_and_an_edited_file_is_picked_up(tmp_path: Any) -> None:
    import hashlib
    import os

    (tmp_path / "agent-a").mkdir()
    index = tmp_path / "agent-a" / "index.js"
    index.write_text("function run(i) { return 'one'; }")
    p = provider(root=str(tmp_path))
    req = request("", [], [Message("user", [TextBlock("x")])])
    req.options["code_agent"]["code_body"] = None
    for _ in range(3):
        resp = await p.call(req)
        assert [b.text for b in resp.content if isinstance(b, TextBlock)] == ["one"]
    assert (p.programs.misses, p.programs.hits) == (1, 2)  # read and hashed once
    index.write_text("function run(i) { return 'two!'; }")
    os.utime(index, ns=(1, 1))  # a different (mtime, size): read again at the next step
    resp = await p.call(req)
    assert [b.text for b in resp.content if isinstance(b, TextBlock)] == ["two!"]
    assert p.programs.misses == 2
    src, digest = p.source("agent-a", None)
    assert digest == hashlib.sha256(src.encode()).hexdigest()
    # inline bodies: by (agent, body); the same code under two agents is one program
    code = "function run(i) { return 'inline'; }"
    assert p.source("a", code)[1] == p.source("b", code)[1] == p.source("a", code)[1]
    assert len([h for h in p.programs.by_hash if p.programs.by_hash[h] == code]) == 1


def test_the_program_cache_is_bounded() -> None:
    from treadle.providers import codejs

    cache = codejs.ProgramCache()
    for i in range(codejs.PROGRAM_CACHE_ENTRIES + 10):
        cache.put(f"function run() {{ return {i}; }}")
    assert len(cache.by_hash) == codejs.PROGRAM_CACHE_ENTRIES
    assert cache.get(codejs.code_hash("function run() { return 0; }")) is None  # the oldest went first
    big = "x" * (codejs.PROGRAM_CACHE_BYTES // 2 + 1)
    cache.put(big + "1")
    cache.put(big + "2")
    assert cache.size <= codejs.PROGRAM_CACHE_BYTES and cache.get(codejs.code_hash(big + "2")) == big + "2"
