"""The OpenAI wire translation without I/O: which fields are honoured or refused, how messages
become treadle's content blocks, how an agent's messages become run segments, and the call ids
that carry a run id."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from treadle.api.openai_compat.agentrun import call_id, parse_call_id, segments_of
from treadle.api.openai_compat.errors import error_doc, from_validation
from treadle.api.openai_compat.responses_wire import parse_responses, to_chat
from treadle.api.openai_compat.wire import UnsupportedParameter, parse_request, to_conversation
from treadle.domain.content import ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock

PNG = "iVBORw0KGgo="


def req(**body: Any) -> Any:
    return parse_request({"model": "m", "messages": [{"role": "user", "content": "hi"}], **body})


def test_default_valued_fields_pass_and_others_are_refused() -> None:
    assert req(n=1, top_p=1, presence_penalty=0, tool_choice="auto", response_format={"type": "text"}).model == "m"
    for field, value in [("n", 2), ("top_p", 0.3), ("tool_choice", "required"),  # required: without tools
                         ("logprobs", True), ("presence_penalty", 0.5)]:
        with pytest.raises(UnsupportedParameter) as exc:
            req(**{field: value})
        assert exc.value.param == field
    with pytest.raises(UnsupportedParameter):
        req(stream_options={"include_usage": True})  # only with stream: true


def test_messages_become_blocks_and_roles_merge() -> None:
    r = parse_request({"model": "m", "messages": [
        {"role": "system", "content": "A"}, {"role": "developer", "content": [{"type": "text", "text": "B"}]},
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]})
    system, messages = to_conversation(r)
    assert system == "A\n\nB"
    assert [m.role for m in messages] == ["user", "assistant", "user"]
    assert messages[0].content == [TextBlock("look"), ImageBlock("image/png", PNG)]
    assert messages[1].content == [ToolUseBlock("c1", "f", {"x": 1}), ToolUseBlock("c2", "g", {})]
    assert messages[2].content == [ToolResultBlock("c1", "one"), ToolResultBlock("c2", "two")]


def test_bad_arguments_and_remote_images_are_refused() -> None:
    bad_args = req(messages=[{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}])
    with pytest.raises(UnsupportedParameter, match="JSON object"):
        to_conversation(bad_args)
    remote = req(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}])
    with pytest.raises(UnsupportedParameter) as exc:
        to_conversation(remote)
    assert exc.value.param == "messages.0.content.0.image_url.url"


def test_an_agent_turn_renders_history_above_the_latest_message() -> None:
    r = req(messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "first"},
                      {"role": "assistant", "content": "reply"}, {"role": "user", "content": "second"}])
    segs = segments_of(r)
    assert segs[0] == {"role": "system", "content": [{"type": "trusted-text", "text": "S"}]}
    history, latest = segs[1]["content"]
    assert "user: first" in history["text"] and "assistant: reply" in history["text"]
    assert latest == {"type": "trusted-text", "text": "second"}
    with pytest.raises(UnsupportedParameter):
        segments_of(req(messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]))


def test_call_ids_carry_the_run() -> None:
    cid = call_id("r_" + "a" * 32, "toolu_x.y")
    assert parse_call_id(cid) == ("r_" + "a" * 32, "toolu_x.y")
    assert parse_call_id("call_abc") is None and parse_call_id("tc.r_1") is None


@pytest.mark.parametrize(("body", "code", "param"), [
    ({"tools": [{"type": "web_search"}]}, "invalid_value", "tools.0.type"),
    ({"text": {"verbosity": "low"}}, "invalid_value", "text.verbosity"),
    ({"reasoning": {"effort": "low", "summary": "auto"}}, "unknown_parameter", "reasoning.summary"),
    ({"stream": True, "stream_options": {"include_obfuscation": True}}, "invalid_value",
     "stream_options.include_obfuscation"),
    ({"top_p": 0.5}, "unsupported_parameter", "top_p"),
    ({"include": ["reasoning.encrypted_content"]}, "unsupported_parameter", "include"),
    ({"max_tool_calls": 3}, "unsupported_parameter", "max_tool_calls"),
    ({"prompt": {"id": "pmpt_1"}}, "unsupported_parameter", "prompt"),
    ({"service_tier": "flex"}, "unsupported_parameter", "service_tier"),
    ({"top_logprobs": 2}, "unsupported_parameter", "top_logprobs"),
    ({"truncation": "auto"}, "unsupported_parameter", "truncation"),
    ({"prompt_cache_key": "k"}, "unknown_parameter", "prompt_cache_key"),
    ({"prompt_cache_retention": "24h"}, "unknown_parameter", "prompt_cache_retention"),
    ({"moderation": {}}, "unknown_parameter", "moderation"),
    ({"context_management": []}, "unknown_parameter", "context_management"),
])
def test_the_responses_table_refusals_name_their_field(body: dict[str, Any], code: str, param: str) -> None:
    """docs/openai.md's Responses compatibility table: each refused request parameter, by name."""
    try:
        to_chat(parse_responses({"model": "m", "input": "x", **body}))
    except UnsupportedParameter as exc:
        err = error_doc(400, exc.message, exc.code, exc.param)["error"]
    except ValidationError as exc:
        err = from_validation(exc)["error"]
    else:
        raise AssertionError(f"{body} was accepted")
    assert (err["code"], err["param"]) == (code, param)
    accepted = {"top_p": 1, "include": [], "service_tier": "auto", "truncation": "disabled", "top_logprobs": 0,
                "stream_options": {"include_obfuscation": False}, "text": {"verbosity": "medium"}}
    assert to_chat(parse_responses({"model": "m", "input": "x", **accepted})).model == "m"
