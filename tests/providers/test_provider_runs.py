"""Whole agent runs through treadle against each wire format's fake vendor (real HTTP on
loopback): text, tool round trips, parallel calls, 429 + Retry-After, 5xx → tier fallback,
streams cut mid-way, bad keys, and the errors a vendor can answer with."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.support.providers import WIRE_FORMATS, MakeHarness, StartVendor, of, types
from tests.support.vendors.base import Fail, text, tools

MEM_A = {"op": "incr", "scope": "agent", "key": "a"}
MEM_B = {"op": "incr", "scope": "agent", "key": "b"}


def agent_on(v: Any, **agent: Any) -> dict[str, Any]:
    return {
        "providers": {v.kind: v.provider()},
        "agents": {"a": {"provider": v.kind, "model": v.model, "system_prompt": "Be brief.", **agent}},
    }


@pytest.mark.parametrize("kind", WIRE_FORMATS)
async def test_text_only_turn(kind: str, vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor(kind)
    v.fake.then(text("Hel", "lo, ", "world."))
    h = await treadle(agent_on(v))
    run, events = await h.run("a", "say hello")
    assert (run.status, run.stop_reason, run.iterations) == ("completed", "end_turn", 1)
    assert of(events, "text") == [{"text": "Hello, world.", "iteration": 1}]
    usage = of(events, "usage")[0]["usage"]
    assert (usage["provider"], usage["model"]) == (kind, v.model)
    assert usage["output_tokens"] > 0
    assert usage["input_tokens"] == (25 if kind == "anthropic" else 20)  # cache reads are counted apart
    assert usage["cache_read_input_tokens"] == 10
    assert types(events)[-1] == "done"
    assert v.fake.violations == []
    body = v.fake.calls[0]
    if kind == "anthropic":
        assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
        assert body["messages"] == [{"role": "user", "content": [  # the history's cache breakpoint
            {"type": "text", "text": "say hello", "cache_control": {"type": "ephemeral"}}]}]
        assert usage["cache_creation_input_tokens"] == 5
    elif kind == "openai":
        assert body["messages"][:2] == [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "say hello"}]  # fmt: skip
        assert body["max_completion_tokens"] == 4096 and body["stream_options"] == {"include_usage": True}
    else:
        assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
        assert body["contents"] == [{"role": "user", "parts": [{"text": "say hello"}]}]
        assert body["generationConfig"]["maxOutputTokens"] == 4096


@pytest.mark.parametrize("kind", WIRE_FORMATS)
async def test_tool_round_trip_over_two_iterations(kind: str, vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor(kind)
    v.fake.then(tools(("Memory", MEM_A), text=("Counting.",)), text("Counted to 1."))
    h = await treadle(agent_on(v, tools=["Memory"]))
    run, events = await h.run("a", "count")
    assert (run.status, run.iterations) == ("completed", 2)
    assert types(events).count("tool_call") == 1 and types(events).count("usage") == 2
    call = of(events, "tool_call")[0]["tool_use"]
    result = of(events, "tool_result")[0]
    assert call["name"] == "Memory" and call["input"] == MEM_A
    assert result["tool_use"]["id"] == call["id"] and not result["is_error"] and '"value":1' in result["text"]
    assert [t["text"] for t in of(events, "text")] == ["Counting.", "Counted to 1."]
    # the second request carries the tool_use and its result, paired
    second = v.fake.calls[1]
    (ref, content, is_error), = v.fake.tool_results(second)
    assert ref == (call["name"] if kind == "gemini" else call["id"])
    assert '"value":1' in content and not is_error
    assert v.fake.tool_uses(second) == [call["name"] if kind == "gemini" else call["id"]]
    assert v.fake.violations == []
    # prompt caching: each call's cache tokens per iteration, summed on the run (as loomcycle)
    per_call = [u["usage"] for u in of(events, "usage")]
    assert [u["cache_read_input_tokens"] for u in per_call] == [10, 10]
    assert run.usage()["cache_read_input_tokens"] == 20
    if kind == "anthropic":
        assert run.usage()["cache_creation_input_tokens"] == 10
        # the breakpoint moves with the conversation: the last block of each request's history
        marked = [[(i, j) for i, m in enumerate(body["messages"]) for j, b in enumerate(m["content"])
                   if "cache_control" in b] for body in v.fake.calls]
        assert marked == [[(0, 0)], [(2, 0)]], marked
        assert second["tools"][-1]["cache_control"] == {"type": "ephemeral"}


@pytest.mark.parametrize("kind", WIRE_FORMATS)
async def test_parallel_tool_calls_in_one_turn(kind: str, vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor(kind)
    v.fake.then(tools(("Memory", MEM_A), ("Memory", MEM_B)), text("Both counted."))
    h = await treadle(agent_on(v, tools=["Memory"]))
    run, events = await h.run("a")
    assert (run.status, run.iterations) == ("completed", 2)
    calls = [c["tool_use"] for c in of(events, "tool_call")]
    results = [r["tool_use"]["id"] for r in of(events, "tool_result")]
    assert [c["input"]["key"] for c in calls] == ["a", "b"]
    assert len({c["id"] for c in calls}) == 2 and sorted(results) == sorted(c["id"] for c in calls)
    answered = v.fake.tool_results(v.fake.calls[1])
    assert len(answered) == 2 and all('"value":1' in content for _, content, _ in answered)
    assert v.fake.violations == []


RETRY_AFTER = {"anthropic": "1", "openai": "1", "gemini": "1s"}


@pytest.mark.parametrize("kind", WIRE_FORMATS)
async def test_429_with_retry_after_then_success(kind: str, vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor(kind)
    v.fake.then(Fail("rate_limit", retry_after=RETRY_AFTER[kind]), text("after the wait"))
    h = await treadle(agent_on(v))
    run, events = await h.run("a")
    assert run.status == "completed"
    (retry,) = of(events, "retry")
    r = retry["retry"]
    assert (r["provider"], r["attempt"], r["wait_ms"], r["reason"], r["code"]) == (
        kind, 1, 1000, "retry-after header", "rate_limited")
    assert types(events).index("retry") < types(events).index("text")
    assert of(events, "text")[0]["text"] == "after the wait"
    assert len(v.fake.calls) == 2 and v.fake.violations == []


FALLBACK_TO = {"anthropic": "openai", "openai": "gemini", "gemini": "anthropic"}


@pytest.mark.parametrize("kind", WIRE_FORMATS)
async def test_500_three_times_then_fallback_to_next_tier_candidate(
    kind: str, vendor: StartVendor, treadle: MakeHarness
) -> None:
    primary, backup = await vendor(kind), await vendor(FALLBACK_TO[kind])
    primary.fake.then(Fail("server"), Fail("server"), Fail("server"), text("primary is back"))
    backup.fake.then(tools(("Memory", MEM_A), text=("backup here.",)))
    config = {
        "providers": {"primary": primary.provider(), "backup": backup.provider()},
        "models": {"main": {"provider": "primary", "model": primary.model}},
        "tiers": {"smart": ["main", {"provider": "backup", "model": backup.model}]},
        "agents": {"a": {"tier": "smart", "tools": ["Memory"]}},
    }
    h = await treadle(config, provider_retries=2)
    run, events = await h.run("a")
    assert (run.status, run.iterations) == ("completed", 2)
    assert [r["retry"]["attempt"] for r in of(events, "retry")] == [1, 2]
    assert [r["retry"]["wait_ms"] for r in of(events, "retry")] == [100, 300]
    (fb,) = of(events, "provider_fallback")
    f = fb["fallback"]
    assert (f["failed_provider"], f["failed_model"], f["new_provider"], f["new_model"]) == (
        "primary", primary.model, "backup", backup.model)
    assert f["reason"] == "provider_unavailable" and "500" in f["cause_error"] and f["tier"] == "smart"
    order = types(events)
    assert order.index("provider_fallback") > max(i for i, t in enumerate(order) if t == "retry")
    # iteration 1 was served by the backup; iteration 2 starts from the first candidate again, and
    # the primary reads a transcript whose tool_use came from another vendor's wire format
    assert [(u["usage"]["provider"], u["usage"]["model"]) for u in of(events, "usage")] == [
        ("backup", backup.model), ("primary", primary.model)]
    assert len(primary.fake.calls) == 4 and len(backup.fake.calls) == 1
    ((_, content, _),) = primary.fake.tool_results(primary.fake.calls[-1])
    assert '"value":1' in content
    assert primary.fake.violations == [] and backup.fake.violations == []


@pytest.mark.parametrize("kind", WIRE_FORMATS)
async def test_stream_cut_in_the_middle_is_retried(kind: str, vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor(kind)
    v.fake.then(text("one ", "two ", "three ", "four", cut_after=3), text("whole answer"))
    h = await treadle(agent_on(v))
    run, events = await h.run("a")
    assert run.status == "completed"
    (retry,) = of(events, "retry")
    assert retry["retry"]["code"] == "stream_truncated" and retry["retry"]["reason"] == "exponential backoff"
    assert of(events, "text") == [{"text": "whole answer", "iteration": 1}]  # no half message stored


@pytest.mark.parametrize("kind", WIRE_FORMATS)
async def test_stream_cut_every_time_fails_the_iteration(kind: str, vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor(kind)
    v.fake.then(text("a", "b", "c", cut_after=2), text("a", "b", "c", cut_after=2))
    h = await treadle(agent_on(v), provider_retries=1)
    run, events = await h.run("a")
    assert (run.status, run.stop_reason) == ("failed", "error")
    assert run.error is not None and run.error["code"] == "stream_truncated"
    assert run.error["provider"] == kind and run.error["model"] == v.model
    assert types(events)[-2:] == ["retry", "error"] and of(events, "text") == []


@pytest.mark.parametrize("kind", WIRE_FORMATS)
async def test_invalid_key_fails_cleanly_and_never_leaks(
    kind: str, vendor: StartVendor, treadle: MakeHarness, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    v = await vendor(kind)
    wrong = {"anthropic": "sk-ant-api03-WRONGwrongWRONG42", "openai": "sk-proj-WRONGwrongWRONG42",
             "gemini": "AIzaWRONGwrongWRONGwrong0000000042"}[kind]  # fmt: skip
    monkeypatch.setenv(v.env, wrong)
    h = await treadle(agent_on(v))
    run, events = await h.run("a")
    assert (run.status, run.stop_reason) == ("failed", "error")
    err = of(events, "error")[0]
    assert err["code"] == "auth_failed" and err["provider"] == kind and err["status"] in (400, 401)
    assert {"anthropic": "invalid x-api-key", "openai": "Incorrect API key provided",
            "gemini": "API key not valid"}[kind] in err["error"]  # fmt: skip
    assert of(events, "retry") == []  # a bad key is not retried
    everything = repr([e.payload for e in events]) + repr(run.error) + caplog.text
    assert wrong not in everything and wrong[-8:] not in everything and v.fake.key not in everything


@pytest.mark.parametrize("kind", WIRE_FORMATS)
async def test_missing_key_variable(kind: str, vendor: StartVendor, treadle: MakeHarness,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    v = await vendor(kind)
    monkeypatch.delenv(v.env)
    h = await treadle(agent_on(v))
    run, _ = await h.run("a")
    assert run.error is not None and run.error["code"] == "missing_api_key" and v.env in run.error["error"]
    assert v.fake.calls == []


@pytest.mark.parametrize("kind", WIRE_FORMATS)
@pytest.mark.parametrize(
    ("failure", "code"),
    [
        ("context", "context_length_exceeded"),
        ("unknown_model", "unknown_model"),
        ("bad_request", "provider_bad_request"),
    ],
)
async def test_vendor_errors_become_a_failed_iteration(
    kind: str, failure: str, code: str, vendor: StartVendor, treadle: MakeHarness
) -> None:
    v = await vendor(kind)
    v.fake.then(Fail(failure))
    h = await treadle(agent_on(v))
    run, events = await h.run("a")
    assert run.status == "failed" and run.error is not None
    assert run.error["code"] == code and run.error["status"] in (400, 404)
    assert run.error["provider_code"]  # the vendor's own error type/status
    assert of(events, "retry") == [] and types(events)[-1] == "error"


@pytest.mark.parametrize("kind", WIRE_FORMATS)
async def test_malformed_stream(kind: str, vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor(kind)
    v.fake.then(text("fine", "then broken", malformed_at=1))
    h = await treadle(agent_on(v))
    run, events = await h.run("a")
    assert run.status == "failed" and run.error is not None
    assert run.error["code"] == "malformed_stream" and "malformed stream" in run.error["error"]
    assert of(events, "text") == []


@pytest.mark.parametrize("kind", WIRE_FORMATS)
async def test_overloaded_is_retried(kind: str, vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor(kind)
    v.fake.then(Fail("overloaded"), text("ok"))
    h = await treadle(agent_on(v))
    run, events = await h.run("a")
    assert run.status == "completed"
    (retry,) = of(events, "retry")
    assert retry["retry"]["code"] == "provider_unavailable" and retry["retry"]["wait_ms"] == 100


@pytest.mark.parametrize("kind", WIRE_FORMATS)
async def test_error_event_inside_the_stream_is_retried(kind: str, vendor: StartVendor, treadle: MakeHarness) -> None:
    v = await vendor(kind)
    v.fake.then(text("par", "tial", error_at=2), text("recovered"))
    h = await treadle(agent_on(v))
    run, events = await h.run("a")
    assert run.status == "completed"
    (retry,) = of(events, "retry")
    said = {"anthropic": "overloaded_error: Overloaded", "openai": "server had an error",
            "gemini": "UNAVAILABLE: The model is overloaded"}[kind]  # fmt: skip
    assert retry["retry"]["code"] == "provider_unavailable" and said in retry["retry"]["error"]
    assert of(events, "text") == [{"text": "recovered", "iteration": 1}]
