"""Structured output and tool choice on /v1/chat/completions, driven by the official `openai` SDK
(`chat.completions.parse` with a pydantic model, `response_format`, `tool_choice`) against a served
treadle whose providers point at fake vendors speaking OpenAI's and Anthropic's wire."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionNamedToolChoiceParam
from pydantic import BaseModel

from tests.support.frontdoors import TOKEN, WEATHER_TOOL, Served, raised, user
from tests.support.vendors.base import text, tools


class City(BaseModel):
    name: str
    population: int


async def test_parse_with_a_pydantic_model_goes_native_to_openai(client: openai.AsyncOpenAI, served: Served) -> None:
    served.openai_fake.then(text('{"name": "Oslo", ', '"population": 709000}'))
    resp = await client.chat.completions.parse(model="gpt", messages=user("biggest city in Norway?"),
                                               response_format=City)
    assert resp.choices[0].message.parsed == City(name="Oslo", population=709000)
    body = served.openai_fake.calls[-1]
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["name"] == "City" and body["response_format"]["json_schema"]["strict"]
    assert "JSON Schema" in body["messages"][0]["content"]  # the instruction is there for every vendor
    assert served.openai_fake.violations == []


async def test_a_vendor_without_native_format_is_checked_and_retried_once(client: openai.AsyncOpenAI,
                                                                          served: Served) -> None:
    fake = served.anthropic_fake
    before = len(fake.calls)
    fake.then(text("Sure! Oslo has about 709k people."), text('```json\n{"name": "Oslo", "population": 709000}\n```'))
    resp = await client.chat.completions.parse(model="claude", messages=user("biggest city in Norway?"),
                                               response_format=City)
    assert resp.choices[0].message.parsed == City(name="Oslo", population=709000)
    assert resp.choices[0].message.content == '{"name": "Oslo", "population": 709000}'  # the fence is gone
    assert len(fake.calls) == before + 2 and "response_format" not in fake.calls[-2]
    retry = fake.calls[-1]["messages"]
    assert retry[-2]["role"] == "assistant" and "not valid JSON" in json.dumps(retry[-1])
    assert fake.violations == []


async def test_an_answer_off_the_schema_twice_is_a_server_error(client: openai.AsyncOpenAI, served: Served) -> None:
    served.anthropic_fake.then(text('{"name": "Oslo"}'), text('{"name": "Oslo", "population": "many"}'))
    with pytest.raises(openai.APIStatusError) as exc:
        await client.chat.completions.parse(model="claude", messages=user("x"), response_format=City)
    assert exc.value.status_code == 502 and exc.value.code == "structured_output_unmet"
    assert "population" in json.dumps(served.anthropic_fake.calls[-1]["messages"][-1])


async def test_json_object_mode_streams_the_checked_answer(client: openai.AsyncOpenAI, served: Served) -> None:
    served.openai_fake.then(text('{"ok": ', "true}"))
    stream = await client.chat.completions.create(model="gpt", messages=user("json please"), stream=True,
                                                  response_format={"type": "json_object"},
                                                  stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert json.loads("".join(c.choices[0].delta.content or "" for c in chunks if c.choices)) == {"ok": True}
    assert chunks[-1].usage is not None and chunks[-2].choices[0].finish_reason == "stop"
    assert served.openai_fake.calls[-1]["response_format"] == {"type": "json_object"}


async def test_tool_choice_required_and_named_reach_both_vendors(client: openai.AsyncOpenAI, served: Served) -> None:
    served.openai_fake.then(tools(("get_weather", {"city": "Oslo"})))
    resp = await client.chat.completions.create(model="gpt", messages=user("weather?"), tools=[WEATHER_TOOL],
                                                tool_choice="required")
    assert resp.choices[0].finish_reason == "tool_calls"
    assert served.openai_fake.calls[-1]["tool_choice"] == "required"
    served.anthropic_fake.then(tools(("get_weather", {"city": "Oslo"})))
    named: ChatCompletionNamedToolChoiceParam = {"type": "function", "function": {"name": "get_weather"}}
    resp = await client.chat.completions.create(model="claude", messages=user("weather?"), tools=[WEATHER_TOOL],
                                                tool_choice=named)
    calls = resp.choices[0].message.tool_calls or []
    assert len(calls) == 1 and [c.function.name for c in calls if c.type == "function"] == ["get_weather"]
    assert served.anthropic_fake.calls[-1]["tool_choice"] == {"type": "tool", "name": "get_weather"}
    served.openai_fake.then(text("just text"))
    resp = await client.chat.completions.create(model="gpt", messages=user("weather?"), tools=[WEATHER_TOOL],
                                                tool_choice="none")
    assert resp.choices[0].message.content == "just text"
    assert served.openai_fake.calls[-1]["tool_choice"] == "none"


async def test_tool_choice_required_is_enforced_on_a_text_answer(client: openai.AsyncOpenAI, served: Served) -> None:
    before = len(served.anthropic_fake.calls)
    served.anthropic_fake.then(text("I won't."), tools(("get_weather", {"city": "Rome"})))
    resp = await client.chat.completions.create(model="claude", messages=user("weather?"), tools=[WEATHER_TOOL],
                                                tool_choice="required")
    assert resp.choices[0].finish_reason == "tool_calls" and len(served.anthropic_fake.calls) == before + 2


async def test_parallel_tool_calls_false_and_reasoning_effort(client: openai.AsyncOpenAI, served: Served) -> None:
    served.openai_fake.then(tools(("get_weather", {"city": "Oslo"})))
    await client.chat.completions.create(model="gpt", messages=user("weather?"), tools=[WEATHER_TOOL],
                                         parallel_tool_calls=False, reasoning_effort="high")
    body = served.openai_fake.calls[-1]
    assert body["parallel_tool_calls"] is False and body["reasoning_effort"] == "high"
    fake = served.anthropic_fake
    before = len(fake.calls)
    fake.then(tools(("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})),
              tools(("get_weather", {"city": "Oslo"})))
    resp = await client.chat.completions.create(model="claude", messages=user("weather?"), tools=[WEATHER_TOOL],
                                                parallel_tool_calls=False, reasoning_effort="high")
    assert len(resp.choices[0].message.tool_calls or []) == 1 and len(fake.calls) == before + 2
    assert fake.calls[-2]["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert fake.calls[-2]["thinking"]["type"] == "enabled"  # effort high: a thinking budget
    assert "at most one tool" in json.dumps(fake.calls[-1]["messages"][-1])


async def test_refusals_name_the_field(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as unknown_tool:
        await client.chat.completions.create(model="gpt", messages=user("x"), tools=[WEATHER_TOOL],
                                             tool_choice={"type": "function", "function": {"name": "nope"}})
    assert unknown_tool.value.param == "tool_choice"
    with pytest.raises(openai.BadRequestError) as no_tools:
        await client.chat.completions.create(model="gpt", messages=user("x"), tool_choice="required")
    assert no_tools.value.param == "tool_choice"
    with pytest.raises(openai.BadRequestError) as bad_schema:
        await client.chat.completions.create(model="gpt", messages=user("x"), response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}})
    assert bad_schema.value.param == "response_format"
    with pytest.raises(openai.BadRequestError) as agent:
        await client.chat.completions.parse(model="helper", messages=user("x"), response_format=City)
    assert agent.value.param == "response_format"
    create = client.chat.completions.create
    refused = [
        await raised(openai.BadRequestError, create(model="helper", messages=user("x"), parallel_tool_calls=False)),
        await raised(openai.BadRequestError, create(model="helper", messages=user("x"), reasoning_effort="high")),
        await raised(openai.BadRequestError, create(model="gpt", messages=user("x"), n=2)),
        await raised(openai.BadRequestError, create(model="gpt", messages=user("x"), logprobs=True)),
    ]
    assert [(e.code, e.param) for e in refused] == [
        ("unsupported_parameter", field) for field in ("parallel_tool_calls", "reasoning_effort", "n", "logprobs")]


async def test_embeddings_echo_any_model_name(client: openai.AsyncOpenAI) -> None:
    resp = await client.embeddings.create(model="text-embedding-3-small", input="the cat sat")
    assert resp.model == "text-embedding-3-small" and len(resp.data[0].embedding) == 384


async def test_the_sync_client_parses_too(served: Served) -> None:
    served.openai_fake.then(text('{"name": "Bergen", "population": 291000}'))

    def parse() -> Any:  # the sync SDK blocks: it runs in a thread while the server serves on this loop
        with openai.OpenAI(base_url=served.url + "/v1", api_key=TOKEN, max_retries=0) as c:
            return c.chat.completions.parse(model="gpt", messages=user("second city?"), response_format=City)

    resp = await asyncio.to_thread(parse)
    assert resp.choices[0].message.parsed == City(name="Bergen", population=291000)


async def test_the_beta_and_stream_helpers_parse(client: openai.AsyncOpenAI, served: Served) -> None:
    """The helpers of the installed SDK that take a pydantic response_format: `beta.chat.completions
    .parse` / `.stream` and `chat.completions.stream` (the parsed answer in its final message)."""
    served.openai_fake.then(text('{"name": "Oslo", "population": 709000}'),
                            text('{"name": "Tromsø", ', '"population": 77000}'),
                            text('{"name": "Bodø", "population": 53000}'))
    beta = await client.beta.chat.completions.parse(model="gpt", messages=user("x"), response_format=City)
    assert beta.choices[0].message.parsed == City(name="Oslo", population=709000)
    async with client.beta.chat.completions.stream(model="gpt", messages=user("y"), response_format=City) as s:
        kinds = [e.type async for e in s]
        final = await s.get_final_completion()
    assert "content.done" in kinds and final.choices[0].message.parsed == City(name="Tromsø", population=77000)
    async with client.chat.completions.stream(model="gpt", messages=user("z"), response_format=City) as s:
        final = await s.get_final_completion()
    assert final.choices[0].message.parsed == City(name="Bodø", population=53000)
    assert served.openai_fake.violations == []
