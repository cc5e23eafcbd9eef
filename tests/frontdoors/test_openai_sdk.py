"""The official `openai` Python SDK against a served treadle (uvicorn on loopback): chat,
streaming, tools, embeddings and models — with the mock provider, with agents (durable runs),
and with providers pointed at fake vendors that speak OpenAI's and Anthropic's real wire formats."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.support.fake_embeddings import bag_of_words
from tests.support.frontdoors import WEATHER_TOOL, Served, user
from tests.support.vendors.base import Fail, text, tools


async def test_models_lists_agents_aliases_tiers_and_the_embedder(client: openai.AsyncOpenAI) -> None:
    models = {m.id: m.owned_by async for m in client.models.list()}
    assert models["helper"] == "treadle:agent" and models["weather"] == "treadle:agent"
    assert models["echo-alias"] == "treadle:alias" and models["gpt"] == "treadle:alias"
    assert models["default"] == "treadle:tier"
    assert models["fake-embed-384"] == "treadle:embedder"
    assert (await client.models.retrieve("helper")).id == "helper"
    with pytest.raises(openai.NotFoundError) as exc:
        await client.models.retrieve("nope")
    assert exc.value.code == "model_not_found"


async def test_chat_with_a_mock_alias(client: openai.AsyncOpenAI) -> None:
    resp = await client.chat.completions.create(
        model="echo-alias", messages=[{"role": "system", "content": "Be brief."}, *user("hello there")])
    assert resp.object == "chat.completion" and resp.model == "echo-alias"
    choice = resp.choices[0]
    assert (choice.message.role, choice.message.content, choice.finish_reason) == ("assistant", "hello there", "stop")
    assert resp.usage is not None and resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    assert resp.model_extra is not None and resp.model_extra["treadle"]["provider"] == "mock"


async def test_streaming_with_a_tier_and_usage(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(model="cheap", messages=user("stream me"), stream=True,
                                                  stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "stream me"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


async def test_an_agent_answers_through_a_durable_run(client: openai.AsyncOpenAI, served: Served) -> None:
    raw = await client.chat.completions.with_raw_response.create(model="helper", messages=user("ping"), user="alice")
    resp = raw.parse()
    assert resp.choices[0].message.content == "ping" and resp.choices[0].finish_reason == "stop"
    run_id = resp.model_extra["treadle"]["run_id"] if resp.model_extra else None
    assert run_id and raw.headers["x-treadle-run-id"] == run_id
    run = (await served.http.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["agent"], run["user_id"]) == ("completed", "helper", "alice")


async def test_an_agent_with_its_own_tools_streams_the_whole_answer(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(model="counter", messages=user("count"), stream=True)
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "done after 1 tool calls"
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_an_agent_hands_application_tools_back_as_tool_calls(client: openai.AsyncOpenAI,
                                                                    served: Served) -> None:
    messages: list[Any] = user("weather in Paris?")
    first = await client.chat.completions.create(model="weather", messages=messages, tools=[WEATHER_TOOL])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert call.function.arguments == '{"city": "Paris"}' and call.id.startswith("tc.r_")
    run_id = call.id.split(".")[1]
    assert (await served.http.get(f"/v1/runs/{run_id}")).json()["status"] == "waiting"
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "22 C, sunny"}]
    stream = await client.chat.completions.create(model="weather", messages=messages, tools=[WEATHER_TOOL],
                                                  stream=True)
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "It is sunny in Paris."
    events = (await served.http.get(f"/v1/runs/{run_id}/events")).json()["events"]
    results = [e for e in events if e["type"] == "tool_result"]
    got = [(r["tool_use"]["name"], r["text"], r["is_error"]) for r in results]
    assert got == [("get_weather", "22 C, sunny", False)]
    assert events[-1]["type"] == "done"


async def test_a_fake_openai_vendor_behind_an_alias(client: openai.AsyncOpenAI, served: Served) -> None:
    served.openai_fake.then(text("Hel", "lo ", "there"))
    resp = await client.chat.completions.create(model="gpt", messages=user("hi"), temperature=0.2, max_tokens=64)
    assert resp.choices[0].message.content == "Hello there"
    body = served.openai_fake.calls[-1]
    assert body["model"] == "gpt-4o-mini" and body["temperature"] == 0.2 and body["max_completion_tokens"] == 64
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert served.openai_fake.violations == []


async def test_vendor_tool_calls_round_trip_and_stream(client: openai.AsyncOpenAI, served: Served) -> None:
    fake = served.openai_fake
    fake.then(tools(("get_weather", {"city": "Oslo"})), text("Cold", " in Oslo."))
    messages: list[Any] = user("weather in Oslo?")
    stream = await client.chat.completions.create(model="openai-fake/gpt-4o-mini", messages=messages,
                                                  tools=[WEATHER_TOOL], stream=True)
    chunks = [c async for c in stream]
    deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(deltas) == 1 and deltas[0].function is not None and deltas[0].function.name == "get_weather"
    assert deltas[0].function.arguments == '{"city": "Oslo"}'
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert fake.calls[-1]["tools"][0]["function"]["name"] == "get_weather"
    call = {"id": deltas[0].id, "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": deltas[0].id, "content": "-5 C"}]
    resp = await client.chat.completions.create(model="openai-fake/gpt-4o-mini", messages=messages,
                                                tools=[WEATHER_TOOL])
    assert resp.choices[0].message.content == "Cold in Oslo."
    assert fake.calls[-1]["messages"][-1] == {"role": "tool", "tool_call_id": deltas[0].id, "content": "-5 C"}
    assert fake.violations == []


async def test_a_tier_falls_back_to_the_anthropic_vendor(client: openai.AsyncOpenAI, served: Served) -> None:
    served.openai_fake.then(Fail("unknown_model"))
    served.anthropic_fake.then(text("From ", "Claude."))
    resp = await client.chat.completions.create(model="default", messages=user("hi"))
    assert resp.choices[0].message.content == "From Claude."
    assert resp.model_extra is not None and resp.model_extra["treadle"]["provider"] == "anthropic-fake"
    assert served.anthropic_fake.violations == []


async def test_a_vendor_failure_mid_stream_raises_in_the_sdk(client: openai.AsyncOpenAI, served: Served) -> None:
    served.openai_fake.then(Fail("auth"))
    stream = await client.chat.completions.create(model="gpt", messages=user("hi"), stream=True)
    with pytest.raises(openai.APIError) as exc:
        async for _ in stream:
            pass
    assert isinstance(exc.value.body, dict) and exc.value.body["code"] == "auth_failed"


async def test_errors_come_in_openais_shape(client: openai.AsyncOpenAI, served: Served) -> None:
    with pytest.raises(openai.NotFoundError) as nf:
        await client.chat.completions.create(model="no-such-model", messages=user("x"))
    assert nf.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        await client.chat.completions.create(model="echo-alias", messages=user("x"), top_p=0.5)
    assert (bad.value.code, bad.value.param) == ("unsupported_parameter", "top_p")
    with pytest.raises(openai.BadRequestError) as unknown:
        await client.chat.completions.create(model="echo-alias", messages=user("x"), extra_body={"bogus": 1})
    assert (unknown.value.code, unknown.value.param) == ("unknown_parameter", "bogus")
    with pytest.raises(openai.BadRequestError) as agent_temp:
        await client.chat.completions.create(model="helper", messages=user("x"), temperature=0.5)
    assert agent_temp.value.param == "temperature"
    stranger = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await stranger.chat.completions.create(model="helper", messages=user("x"))
    await stranger.close()
    raw = await served.http.post("/v1/chat/completions", json={"model": "helper"})
    assert raw.status_code == 400
    assert raw.json() == {"error": {"message": "Missing required parameter: messages", "type": "invalid_request_error",
                                    "param": "messages", "code": "missing_required_parameter"}}
    # other routes keep treadle's own shape
    assert set((await served.http.get("/v1/runs/r_nope")).json()) == {"code", "error"}


async def test_embeddings_float_and_base64(client: openai.AsyncOpenAI, served: Served) -> None:
    texts = ["the cat sat", "dogs bark loudly"]
    as_base64 = await client.embeddings.create(model="fake-embed-384", input=texts)  # the SDK asks for base64
    as_float = await client.embeddings.create(model="fake-embed-384", input=texts, encoding_format="float")
    assert served.embed_fake.requests[-1]["input"] == texts
    for resp in (as_base64, as_float):
        assert [d.index for d in resp.data] == [0, 1] and resp.model == "fake-embed-384"
        for d, t in zip(resp.data, texts, strict=True):
            assert d.embedding == pytest.approx(bag_of_words(t, 384), abs=1e-6)
    one = await client.embeddings.create(model="fake-embed-384", input="solo", dimensions=384)
    assert len(one.data) == 1 and len(one.data[0].embedding) == 384
    with pytest.raises(openai.NotFoundError):
        await client.models.retrieve("text-embedding-3-large")
    with pytest.raises(openai.BadRequestError) as dims:
        await client.embeddings.create(model="fake-embed-384", input="x", dimensions=12)
    assert dims.value.param == "dimensions"


async def test_a_failed_agent_run_is_a_server_error(client: openai.AsyncOpenAI, served: Served) -> None:
    served.openai_fake.then(Fail("auth"))
    with pytest.raises(openai.InternalServerError) as exc:
        await client.chat.completions.create(model="vendor-agent", messages=user("hi"))
    assert exc.value.status_code == 502 and exc.value.code == "auth_failed"
    served.openai_fake.then(text("Agent ", "via vendor."))
    stream = await client.chat.completions.create(model="vendor-agent", messages=user("again"), stream=True)
    assert "".join([c.choices[0].delta.content or "" async for c in stream]) == "Agent via vendor."
