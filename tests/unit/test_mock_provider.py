"""The deterministic mock provider: echo, tool-caller, script, and deterministic failures."""

from __future__ import annotations

import pytest

from treadle.config import MockSettings, ScriptTurn
from treadle.domain.content import Message, TextBlock, ToolResultBlock, ToolUseBlock
from treadle.errors import ProviderError, RetryableProviderError
from treadle.providers.base import ModelRequest, RunInfo, ToolSpec
from treadle.providers.mock import FIXED_TOOL_INPUTS, MockProvider, tool_use_id

MEMORY = ToolSpec("Memory", "memory", {"type": "object"})
CONTEXT = ToolSpec("Context", "context", {"type": "object"})


def request(
    model: str,
    messages: list[Message],
    *,
    tools: list[ToolSpec] | None = None,
    run_id: str = "r_1",
    iteration: int = 1,
    attempt: int = 0,
    **mock: object,
) -> ModelRequest:
    return ModelRequest(
        model=model,
        system="sys",
        messages=messages,
        tools=tools or [],
        run=RunInfo(run_id, "agent", iteration, attempt),
        options={"mock": MockSettings(**mock)},  # type: ignore[arg-type]
    )


def user(text: str) -> Message:
    return Message("user", [TextBlock(text)])


def tool_turn(tid: str, name: str = "Memory") -> list[Message]:
    return [Message("assistant", [ToolUseBlock(tid, name, {})]), Message("user", [ToolResultBlock(tid, "ok")])]


async def test_echo_returns_the_last_user_text() -> None:
    msgs = [user("first"), Message("assistant", [TextBlock("first")]), user("second question")]
    resp = await MockProvider().call(request("echo", msgs))
    assert resp.content == [TextBlock("second question")]
    assert resp.stop_reason == "end_turn"
    assert (resp.model, resp.provider) == ("echo", "mock")
    assert resp.usage.input_tokens >= 1 and resp.usage.output_tokens >= 1


async def test_echo_skips_tool_result_only_user_messages() -> None:
    msgs = [user("the prompt"), *tool_turn("t1")]
    resp = await MockProvider().call(request("echo", msgs))
    assert resp.content == [TextBlock("the prompt")]


async def test_echo_streams_its_text_to_on_delta() -> None:
    seen: list[tuple[str, str]] = []

    async def sink(kind: str, delta: str) -> None:
        seen.append((kind, delta))

    await MockProvider().call(request("echo", [user("hey")]), on_delta=sink)
    assert seen == [("text", "hey")]


async def test_tool_caller_calls_the_first_tool_with_a_deterministic_id() -> None:
    p = MockProvider()
    req = request("tool-caller", [user("go")], tools=[MEMORY, CONTEXT], run_id="r_abc", iteration=1)
    a, b = await p.call(req), await p.call(req)
    assert a.content == b.content
    assert a.stop_reason == "tool_use"
    (block,) = a.content
    assert isinstance(block, ToolUseBlock)
    assert block.name == "Memory" and block.input == FIXED_TOOL_INPUTS["Memory"]
    assert block.id == tool_use_id("r_abc", 1, 0) and block.id.startswith("toolu_")
    # the input is a copy: mutating it does not change the next answer
    block.input["key"] = "mutated"
    assert (await p.call(req)).content[0].input == FIXED_TOOL_INPUTS["Memory"]  # type: ignore[union-attr]


async def test_tool_use_ids_differ_by_run_and_iteration() -> None:
    ids = {tool_use_id("r_1", 1, 0), tool_use_id("r_1", 2, 0), tool_use_id("r_2", 1, 0), tool_use_id("r_1", 1, 1)}
    assert len(ids) == 4
    assert tool_use_id("r_1", 1, 0) == tool_use_id("r_1", 1, 0)


async def test_tool_caller_stops_after_tool_calls() -> None:
    p = MockProvider()
    history = [user("go")]
    for i in range(2):
        resp = await p.call(request("tool-caller", history, tools=[MEMORY], iteration=i + 1, tool_calls=2))
        assert resp.stop_reason == "tool_use"
        history += tool_turn(resp.content[0].id)  # type: ignore[union-attr]
    resp = await p.call(request("tool-caller", history, tools=[MEMORY], iteration=3, tool_calls=2))
    assert resp.content == [TextBlock("done after 2 tool calls")] and resp.stop_reason == "end_turn"


async def test_tool_caller_without_tools_answers_in_text() -> None:
    resp = await MockProvider().call(request("tool-caller", [user("go")]))
    assert resp.content == [TextBlock("done after 0 tool calls")]


async def test_script_follows_turns_and_repeats_the_last() -> None:
    script = [ScriptTurn(tool="Context", input={"op": "self"}), ScriptTurn(text="finished")]
    p = MockProvider()
    first = await p.call(request("script", [user("go")], run_id="r_s", iteration=1, script=script))
    assert first.content == [ToolUseBlock(tool_use_id("r_s", 1, 0), "Context", {"op": "self"})]
    history = [user("go"), *tool_turn(first.content[0].id, "Context")]  # type: ignore[union-attr]
    second = await p.call(request("script", history, run_id="r_s", iteration=2, script=script))
    assert second.content == [TextBlock("finished")]
    history += [Message("assistant", [TextBlock("finished")]), user("more")]
    third = await p.call(request("script", history, run_id="r_s", iteration=3, script=script))
    assert third.content == [TextBlock("finished")]


async def test_script_model_without_script_fails() -> None:
    with pytest.raises(ProviderError) as info:
        await MockProvider().call(request("script", [user("go")]))
    assert info.value.code == "mock_script_missing"
    assert not isinstance(info.value, RetryableProviderError)


async def test_unknown_model() -> None:
    with pytest.raises(ProviderError, match="unknown model 'gpt'"):
        await MockProvider().call(request("gpt", [user("go")]))


async def test_default_settings_when_options_are_missing() -> None:
    req = ModelRequest(model="echo", system="", messages=[user("x")], tools=[])
    resp = await MockProvider().call(req)
    assert resp.content == [TextBlock("x")]


async def outcome(run_id: str, iteration: int, attempt: int, rate: float, seed: int = 0) -> bool:
    """True when the call failed with the mock's 429."""
    try:
        await MockProvider().call(
            request("echo", [user("x")], run_id=run_id, iteration=iteration, attempt=attempt, error_rate=rate,
                    seed=seed)
        )
    except RetryableProviderError as exc:
        assert exc.code == "rate_limited" and exc.retry_after_s is not None and exc.retry_after_s > 0
        return True
    return False


async def test_error_rate_is_deterministic_per_attempt() -> None:
    pattern = [await outcome("r_e", 1, a, 0.5) for a in range(40)]
    again = [await outcome("r_e", 1, a, 0.5) for a in range(40)]
    assert pattern == again
    assert 5 < sum(pattern) < 35  # a mix, not all-or-nothing
    other_seed = [await outcome("r_e", 1, a, 0.5, seed=1) for a in range(40)]
    assert other_seed != pattern
    other_iteration = [await outcome("r_e", 2, a, 0.5) for a in range(40)]
    assert other_iteration != pattern


async def test_error_rate_bounds() -> None:
    assert all([await outcome("r", 1, a, 1.0) for a in range(10)])
    assert not any([await outcome("r", 1, a, 0.0) for a in range(10)])
