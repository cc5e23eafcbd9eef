"""What is particular to one vendor or one routing rule: Anthropic thinking echoed with its
signature, reasoning dropped when a run moves to a provider that cannot read it, DeepSeek's
reasoning_content and string contents, Ollama's key-less local server and context window,
timeouts, pinning a run to the candidate that answered it, and tool ids kept unique."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.providers import MakeHarness, StartVendor, of, types
from tests.support.vendors.base import Fail, ToolCall, Turn, text, tools
from treadle.domain.content import Message, TextBlock, ToolResultBlock, ToolUseBlock
from treadle.providers.openai_chat import DEEPSEEK, encode_messages

MEM = {"op": "incr", "scope": "agent", "key": "k"}


async def test_anthropic_thinking_is_echoed_with_its_signature(vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor("anthropic")
    v.fake.then(tools(("Memory", MEM), thinking="I should count first."), text("Counted."))
    config = {
        "providers": {"claude": v.provider(options={"thinking_budget_tokens": 1024})},
        "agents": {"a": {"provider": "claude", "model": v.model, "tools": ["Memory"]}},
    }
    h = await treadle(config)
    run, events = await h.run("a")
    assert run.status == "completed"
    (thinking,) = of(events, "thinking")
    assert thinking["text"] == "I should count first." and thinking["source"] == "anthropic"
    assert thinking["signature"] in v.fake.signatures
    first, second = v.fake.calls
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assistant = second["messages"][1]
    assert assistant["role"] == "assistant" and assistant["content"][0] == {
        "type": "thinking", "thinking": "I should count first.", "signature": thinking["signature"]}
    assert v.fake.violations == []


async def test_reasoning_is_dropped_when_the_run_moves_to_another_provider(
    vendor: StartVendor, treadle: MakeHarness
) -> None:
    claude, gpt = await vendor("anthropic"), await vendor("openai")
    claude.fake.then(tools(("Memory", MEM), thinking="Private chain of thought."), Fail("overloaded"))
    gpt.fake.then(text("Finished on OpenAI."))
    config = {
        "providers": {"claude": claude.provider(options={"thinking_budget_tokens": 2048}), "gpt": gpt.provider()},
        "tiers": {"t": [{"provider": "claude", "model": claude.model}, {"provider": "gpt", "model": gpt.model}]},
        "agents": {"a": {"tier": "t", "tools": ["Memory"]}},
    }
    h = await treadle(config, provider_retries=0)
    run, events = await h.run("a")
    assert run.status == "completed"
    order = types(events)
    assert order.index("provider_fallback") < order.index("reasoning_invalidated") < order.index("text")
    (inv,) = of(events, "reasoning_invalidated")
    assert (inv["provider"], inv["dropped"]) == ("gpt", 1)
    body = gpt.fake.calls[0]
    assert "Private chain of thought." not in repr(body)
    assistant = next(m for m in body["messages"] if m["role"] == "assistant")
    tool_id = of(events, "tool_call")[0]["tool_use"]["id"]
    assert assistant["tool_calls"][0]["id"] == tool_id and tool_id.startswith("toolu_")
    assert gpt.fake.violations == [] and claude.fake.violations == []


async def test_deepseek_reasoning_content_and_string_contents(vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor("deepseek")
    v.fake.then(tools(("Memory", MEM), thinking="Need the counter."), text("The counter is 1."))
    h = await treadle({"providers": {"ds": v.provider()},
                       "agents": {"a": {"provider": "ds", "model": v.model, "tools": ["Memory"]}}})  # fmt: skip
    run, events = await h.run("a")
    assert run.status == "completed"
    assert of(events, "thinking")[0]["source"] == "deepseek"
    second = v.fake.calls[1]
    assistant = second["messages"][1]
    assert assistant["reasoning_content"] == "Need the counter." and assistant["content"] == ""
    assert second["messages"][2]["role"] == "tool" and isinstance(second["messages"][2]["content"], str)
    assert second["max_tokens"] == 4096 and "max_completion_tokens" not in second
    usage = of(events, "usage")[0]["usage"]
    assert (usage["input_tokens"], usage["cache_read_input_tokens"]) == (20, 10)
    assert v.fake.violations == []


def test_deepseek_tool_messages_always_carry_content() -> None:
    msgs = [
        Message("user", [TextBlock("go")]),
        Message("assistant", [ToolUseBlock("call_1", "Echo", {})]),
        Message("user", [ToolResultBlock("call_1", "")]),
    ]
    wire = encode_messages("", msgs, DEEPSEEK)
    assert wire[1] == {"role": "assistant", "content": "",
                       "tool_calls": [{"id": "call_1", "type": "function",
                                       "function": {"name": "Echo", "arguments": "{}"}}]}  # fmt: skip
    assert wire[2] == {"role": "tool", "tool_call_id": "call_1", "content": ""}


async def test_ollama_local_needs_no_key_and_reports_its_context_window(
    vendor: StartVendor, treadle: MakeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OLLAMA_API_KEY", raising=False)
    v = await vendor("ollama")
    v.fake.then(tools(("Memory", MEM), thinking="hmm"), text("done"))
    h = await treadle({"providers": {"local": {"driver": "ollama", "base_url": v.fake.url}},
                       "agents": {"a": {"provider": "local", "model": v.model, "tools": ["Memory"]}}})  # fmt: skip
    run, events = await h.run("a")
    assert run.status == "completed"
    assert [u["usage"]["max_context_tokens"] for u in of(events, "usage")] == [8192, 8192]
    assert v.fake.shows == [v.model]  # asked once, then remembered
    assert all("authorization" not in r.headers for r in v.fake.server.requests)
    assert of(events, "thinking")[0]["source"] == "ollama"
    assert v.fake.violations == []  # the fake refuses reasoning_content echoed back
    provider = h.rt.agents["a"].candidates[0].provider
    assert provider.endpoint.first_byte_s == 600.0  # type: ignore[attr-defined]


async def test_ollama_cloud_sends_the_key(vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor("ollama", key="ollama-cloud-key-0123456789", cloud=True)
    v.fake.then(text("from the cloud"))
    h = await treadle({"providers": {"cloud": {"driver": "ollama_cloud", "base_url": v.fake.url, "api_key_env": v.env}},
                       "agents": {"a": {"provider": "cloud", "model": v.model}}})  # fmt: skip
    run, events = await h.run("a")
    assert run.status == "completed" and of(events, "usage")[0]["usage"]["max_context_tokens"] == 8192
    assert {r.headers.get("authorization") for r in v.fake.server.requests} == {f"Bearer {v.fake.key}"}


async def test_ollama_window_falls_back_to_model_info(vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor("ollama", num_ctx=None, context_length=32768)
    v.fake.then(text("hi"))
    h = await treadle({"providers": {"local": {"driver": "ollama", "base_url": v.fake.url}},
                       "agents": {"a": {"provider": "local", "model": v.model}}})  # fmt: skip
    _, events = await h.run("a")
    assert of(events, "usage")[0]["usage"]["max_context_tokens"] == 32768


async def test_ollama_unknown_model_is_reported(vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor("ollama")
    v.fake.then(Fail("unknown_model"))
    h = await treadle({"providers": {"local": {"driver": "ollama", "base_url": v.fake.url}},
                       "agents": {"a": {"provider": "local", "model": "qwen9"}}})  # fmt: skip
    run, _ = await h.run("a")
    assert run.error is not None and run.error["code"] == "unknown_model" and "try pulling it" in run.error["error"]


@pytest.mark.parametrize(("turn", "phase"), [
    (Turn(text=["late"], first_byte_delay_s=1.0), "first_byte"),
    (Turn(text=["a", "b", "c"], chunk_delay_s=1.0), "idle"),
])  # fmt: skip
async def test_timeouts(turn: Turn, phase: str, vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor("openai")
    v.fake.then(turn)
    timeouts = {"first_byte": 0.3, "idle": 0.3}
    h = await treadle({"providers": {"p": v.provider(timeouts=timeouts, retries=0)},
                       "agents": {"a": {"provider": "p", "model": v.model}}})  # fmt: skip
    run, _ = await h.run("a")
    assert run.error is not None and run.error["code"] == "provider_timeout"
    assert f"{phase} timeout 0.3s" in run.error["error"]


async def test_pin_after_success_keeps_the_run_on_its_candidate(vendor: StartVendor, treadle: MakeHarness) -> None:
    a, b = await vendor("openai"), await vendor("gemini")
    a.fake.then(Fail("server"))
    b.fake.then(tools(("Memory", MEM)), Fail("server"))
    config = {
        "providers": {"a": a.provider(), "b": b.provider()},
        "tiers": {"t": {"candidates": [{"provider": "a", "model": a.model}, {"provider": "b", "model": b.model}],
                        "pin_after_success": True}},
        "agents": {"x": {"tier": "t", "tools": ["Memory"]}},
    }  # fmt: skip
    h = await treadle(config, provider_retries=0)
    run, events = await h.run("x")
    assert run.status == "failed" and run.error is not None and run.error["provider"] == "b"
    assert len(a.fake.calls) == 1 and len(b.fake.calls) == 2  # iteration 2 never went back to `a`
    (sup,) = of(events, "fallback_suppressed")
    assert (sup["provider"], sup["reason"]) == ("b", "provider_unavailable")


async def test_unknown_model_falls_back_to_the_next_candidate(vendor: StartVendor, treadle: MakeHarness) -> None:
    a, b = await vendor("anthropic"), await vendor("openai")
    b.fake.then(text("fine"))
    config = {
        "providers": {"a": a.provider(), "b": b.provider()},
        "tiers": {"t": [{"provider": "a", "model": "claude-retired-1"}, {"provider": "b", "model": b.model}]},
        "agents": {"x": {"tier": "t"}},
    }
    h = await treadle(config)
    run, events = await h.run("x")
    assert run.status == "completed" and of(events, "retry") == []
    assert of(events, "provider_fallback")[0]["fallback"]["reason"] == "unknown_model"


async def test_reused_tool_ids_are_made_unique(vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor("ollama")
    same = ToolCall("Memory", MEM, id="call_0")
    v.fake.then(Turn(tools=[same]), Turn(tools=[same]), text("two"))
    h = await treadle({"providers": {"local": {"driver": "ollama", "base_url": v.fake.url}},
                       "agents": {"a": {"provider": "local", "model": v.model, "tools": ["Memory"]}}})  # fmt: skip
    run, events = await h.run("a")
    assert run.status == "completed"
    ids = [c["tool_use"]["id"] for c in of(events, "tool_call")]
    assert ids[0] == "call_0" and ids[1] != "call_0" and len(set(ids)) == 2
    assert len(of(events, "tool_result")) == 2 and v.fake.violations == []


async def test_mock_agents_need_no_providers_section(treadle: MakeHarness) -> None:
    h = await treadle({"agents": {"e": {"model": "echo"}}})
    run, events = await h.run("e", "ping")
    assert run.status == "completed" and of(events, "text")[0]["text"] == "ping"
    usage: dict[str, Any] = of(events, "usage")[0]["usage"]
    assert (usage["provider"], usage["model"]) == ("mock", "echo")


class _BrokenDriver:
    name = "broken"

    async def call(self, req: Any, on_delta: Any = None) -> Any:
        raise KeyError("choices")  # a driver bug, outside the ProviderError contract


async def test_a_driver_bug_still_ends_as_an_error_event(treadle: MakeHarness) -> None:
    config = {"providers": {"broken": {"driver": "mock"}}, "agents": {"a": {"provider": "broken", "model": "echo"}}}
    h = await treadle(config, providers={"broken": _BrokenDriver()})
    run, events = await h.run("a")
    assert (run.status, types(events)[-1]) == ("failed", "error")
    assert run.error is not None and run.error["code"] == "provider_error" and "KeyError" in run.error["error"]


def test_errors_never_carry_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from treadle.config import ProviderConfig
    from treadle.providers.http import VendorError
    from treadle.providers.registry import build_provider

    monkeypatch.setenv("REDACT_TEST_KEY", "opaque-credential-value-42")
    driver = build_provider("p", ProviderConfig(driver="openai", api_key_env="REDACT_TEST_KEY"))
    err = driver.error_from(  # type: ignore[attr-defined]
        VendorError("bad key opaque-credential-value-42 (also sk-live-abcdefghijkl, AIzaSyA0123456789abcdefghij)"),
        "m", status=401,
    )
    assert err.code == "auth_failed" and "opaque-credential-value-42" not in err.message
    assert "[redacted:REDACT_TEST_KEY]" in err.message and "sk-live" not in err.message and "AIza" not in err.message
