"""OpenAI's Responses API (`client.responses.create / stream / parse`) from the official `openai`
SDK against a served treadle: aliases on a fake OpenAI vendor and the mock, an agent's durable run
with function calls handed back and continued, structured output, and the refusals by name."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Sequence
from typing import Any, cast

import openai
import pytest
from openai.types.responses import FunctionToolParam, ResponseInputItemParam, ResponseStreamEvent
from openai.types.responses import Response as OpenAIResponse
from pydantic import BaseModel, TypeAdapter

from tests.support.frontdoors import TOKEN, Served, raised
from tests.support.vendors.base import text, tools
from treadle.testing import until

WEATHER: FunctionToolParam = {
    "type": "function", "name": "get_weather", "description": "The weather in a city", "strict": False,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}

STRICT_WEATHER: FunctionToolParam = {**WEATHER, "strict": True}


#: a vendor answer slow enough that a background response is still under way when it is cancelled
SLOW_S = 3.0


class City(BaseModel):
    name: str
    population: int


def as_input(output: Sequence[BaseModel]) -> list[ResponseInputItemParam]:
    """Output items handed back as the next call's input, as a client does between turns. The SDK
    types output as models and input as TypedDicts of the same shape, so the dump is cast."""
    return [cast("ResponseInputItemParam", o.model_dump(exclude_none=True)) for o in output]


def treadle_extra(resp: BaseModel) -> dict[str, Any]:
    """treadle's own block of a response (`treadle`: run_id, request_id), an extra to the SDK."""
    extra = (resp.model_extra or {}).get("treadle")
    assert isinstance(extra, dict), resp.model_extra
    return extra


async def test_create_with_a_string_input_and_instructions(client: openai.AsyncOpenAI, served: Served) -> None:
    served.openai_fake.then(text("Hel", "lo!"))
    resp = await client.responses.create(model="gpt", input="hi", instructions="Be brief.", max_output_tokens=50,
                                         metadata={"ticket": "42"})
    assert resp.object == "response" and resp.status == "completed" and resp.id.startswith("resp_")
    assert resp.output_text == "Hello!" and resp.metadata == {"ticket": "42"}
    assert resp.usage is not None and resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    body = served.openai_fake.calls[-1]
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert body["max_completion_tokens"] == 50 and served.openai_fake.violations == []


async def test_stream_events_in_order_with_sequence_numbers(client: openai.AsyncOpenAI) -> None:
    stream = await client.responses.create(model="echo-alias", input="stream me", stream=True,
                                           stream_options={"include_obfuscation": False})
    events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "stream me"
    done = events[-1]
    assert done.type == "response.completed" and done.response.output_text == "stream me"


async def test_the_stream_helper_and_function_calls(client: openai.AsyncOpenAI, served: Served) -> None:
    served.openai_fake.then(tools(("get_weather", {"city": "Oslo"})))
    async with client.responses.stream(model="gpt", input="weather in Oslo?", tools=[WEATHER],
                                       tool_choice="required") as stream:
        deltas = [e.delta async for e in stream if e.type == "response.function_call_arguments.delta"]
        final = await stream.get_final_response()
    assert deltas == ['{"city": "Oslo"}']
    call = final.output[0]
    assert call.type == "function_call" and call.name == "get_weather" and call.arguments == '{"city": "Oslo"}'
    assert served.openai_fake.calls[-1]["tool_choice"] == "required"
    served.openai_fake.then(tools(("get_weather", {"city": "Oslo"})))
    single = await client.responses.create(model="gpt", input="weather?", tools=[WEATHER], parallel_tool_calls=False,
                                           reasoning={"effort": "low"})
    assert single.parallel_tool_calls is False and single.reasoning is not None and single.reasoning.effort == "low"
    body = served.openai_fake.calls[-1]
    assert body["parallel_tool_calls"] is False and body["reasoning_effort"] == "low"
    served.openai_fake.then(text("Cold."))
    follow = await client.responses.create(model="gpt", tools=[WEATHER], input=[
        {"role": "user", "content": "weather in Oslo?"}, *as_input(final.output),
        {"type": "function_call_output", "call_id": call.call_id, "output": "-5 C"}])
    assert follow.output_text == "Cold."
    sent = served.openai_fake.calls[-1]["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": "-5 C"}
    assert served.openai_fake.violations == []


async def test_an_agent_run_hands_back_function_calls_and_continues(client: openai.AsyncOpenAI,
                                                                    served: Served) -> None:
    first = await client.responses.create(model="weather", input="weather in Paris?", tools=[WEATHER])
    call = first.output[-1]
    assert call.type == "function_call" and call.call_id.startswith("tc.r_") and call.name == "get_weather"
    run_id = call.call_id.split(".")[1]
    assert (await served.http.get(f"/v1/runs/{run_id}")).json()["status"] == "waiting"
    second = await client.responses.create(model="weather", tools=[WEATHER], input=[
        {"role": "user", "content": "weather in Paris?"}, *as_input(first.output),
        {"type": "function_call_output", "call_id": call.call_id, "output": "22 C, sunny"}])
    assert second.output_text == "It is sunny in Paris."
    assert treadle_extra(second)["run_id"] == run_id
    assert (await served.http.get(f"/v1/runs/{run_id}")).json()["status"] == "completed"


async def test_parse_with_a_pydantic_text_format(client: openai.AsyncOpenAI, served: Served) -> None:
    served.anthropic_fake.then(text('{"name": "Oslo", "population": 709000}'))
    resp = await client.responses.parse(model="claude", input="biggest city in Norway?", text_format=City)
    assert resp.output_parsed == City(name="Oslo", population=709000)
    assert "JSON Schema" in served.anthropic_fake.calls[-1]["system"][0]["text"]


async def test_the_sync_client(served: Served) -> None:
    def create() -> Any:
        with openai.OpenAI(base_url=served.url + "/v1", api_key=TOKEN, max_retries=0) as c:
            return c.responses.create(model="echo-alias", input=[{"role": "user", "content": [
                {"type": "input_text", "text": "sync "}, {"type": "input_text", "text": "works"}]}])

    assert (await asyncio.to_thread(create)).output_text == "sync works"


async def test_refusals_name_the_field_in_openais_shape(client: openai.AsyncOpenAI, served: Served) -> None:
    create = client.responses.create
    refused = [await raised(openai.BadRequestError, create(model="gpt", input="x", conversation="conv_x")),
               await raised(openai.BadRequestError, create(model="gpt", input="x", top_p=0.2)),
               await raised(openai.BadRequestError, create(model="gpt", input="x", background=True))]
    assert [(e.code, e.param) for e in refused] == [
        ("unsupported_parameter", field) for field in ("conversation", "top_p", "background")]
    with pytest.raises(openai.BadRequestError) as unknown:
        await client.responses.create(model="gpt", input="x", extra_body={"bogus": 1})
    assert unknown.value.param == "bogus"
    for name, value in (("prompt_cache_key", "k"), ("moderation", {"input": True}), ("context_management", [])):
        with pytest.raises(openai.BadRequestError) as later:  # OpenAI's newer fields: refused by name too
            await client.responses.create(model="gpt", input="x", extra_body={name: value})
        assert (later.value.code, later.value.param) == ("unknown_parameter", name)
    with pytest.raises(openai.BadRequestError) as padded:
        await client.responses.create(model="gpt", input="x", stream=True, stream_options={"include_obfuscation": True})
    assert (padded.value.code, padded.value.param) == ("invalid_value", "stream_options.include_obfuscation")
    with pytest.raises(openai.BadRequestError) as padded_get:
        await client.responses.retrieve("resp_123", stream=True, include_obfuscation=True)
    assert padded_get.value.param == "include_obfuscation"
    with pytest.raises(openai.NotFoundError) as model:
        await client.responses.create(model="nope", input="x")
    assert model.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError) as gone:
        await client.responses.retrieve("resp_123")
    assert gone.value.code == "response_not_found"
    calls: list[Awaitable[object]] = [client.responses.cancel("resp_123"), client.responses.delete("resp_123"),
                                      client.responses.input_items.list("resp_123")]
    for call in calls:
        none = await raised(openai.NotFoundError, call)
        assert none.code == "response_not_found" and isinstance(none.body, dict) and none.body["message"]



async def test_strict_tools_are_checked_and_retried(client: openai.AsyncOpenAI, served: Served) -> None:
    fake = served.openai_fake
    fake.then(tools(("get_weather", {"town": "Oslo"})), tools(("get_weather", {"city": "Oslo"})))
    resp = await client.responses.create(model="gpt", input="x", tools=[STRICT_WEATHER])
    assert [(o.type, getattr(o, "arguments", None)) for o in resp.output] == [("function_call", '{"city": "Oslo"}')]
    assert "do not conform" in str(fake.calls[-1]["messages"][-1]["content"])
    with pytest.raises(openai.BadRequestError) as agent:
        await client.responses.create(model="weather", input="x", tools=[STRICT_WEATHER])
    assert agent.value.param == "tools.0.function.strict"


async def test_each_call_writes_its_audit_line(client: openai.AsyncOpenAI, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="treadle.audit"):
        resp = await client.responses.create(model="echo-alias", input="audit me", user="alice")
        await client.chat.completions.create(model="echo-alias", messages=[{"role": "user", "content": "and me"}])
    lines = [r.getMessage() for r in caplog.records if r.name == "treadle.audit"]
    mine = [line for line in lines if line.startswith("responses: ")]
    assert len(mine) == 1 and f"request_id={treadle_extra(resp)['request_id']}" in mine[0]
    assert "user_id=alice" in mine[0] and "status=ok" in mine[0]
    assert any(line.startswith("chat_completions: ") for line in lines)


async def test_a_stored_response_is_retrieved_listed_chained_and_deleted(client: openai.AsyncOpenAI,
                                                                         served: Served) -> None:
    served.openai_fake.then(text("Paris."), text("About 2.1 million."))
    first = await client.responses.create(model="gpt", input="capital of France?", instructions="Be brief.")
    assert first.model_extra is not None and first.model_extra["store"] is True  # not a field of the SDK's Response
    got = await client.responses.retrieve(first.id)
    assert got.model_dump() == first.model_dump()
    items = await client.responses.input_items.list(first.id)
    assert [(i.type, i.role if i.type == "message" else None) for i in items.data] == [("message", "user")]
    second = await client.responses.create(model="gpt", input="its population?", previous_response_id=first.id)
    assert second.previous_response_id == first.id and second.output_text == "About 2.1 million."
    sent = served.openai_fake.calls[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]  # instructions are not carried over
    assert sent[1]["content"] == "Paris."
    await client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as gone:
        await client.responses.create(model="gpt", input="x", previous_response_id=first.id)
    assert gone.value.param == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as cut:  # an ancestor gone: refused, not a shorter history
        await client.responses.create(model="gpt", input="x", previous_response_id=second.id)
    assert (cut.value.code, cut.value.param) == ("previous_response_not_found", "previous_response_id")
    with pytest.raises(openai.BadRequestError) as sync:
        await client.responses.cancel(second.id)
    assert sync.value.code == "response_not_background"


async def test_a_background_agent_response_is_polled_and_its_stream_resumed(client: openai.AsyncOpenAI) -> None:
    resp = await client.responses.create(model="counter", input="count", background=True)
    assert resp.status == "queued" and resp.background is True

    async def done() -> bool:
        return (await client.responses.retrieve(resp.id)).status == "completed"

    await until(done, timeout=30, interval=0.1, what="the background response")
    final = await client.responses.retrieve(resp.id)
    assert final.output_text
    whole = [e async for e in await client.responses.retrieve(resp.id, stream=True)]
    assert [e.sequence_number for e in whole] == list(range(len(whole)))
    assert whole[0].type == "response.created" and whole[-1].type == "response.completed"
    rest = [e async for e in await client.responses.retrieve(resp.id, stream=True, starting_after=2)]
    assert [e.model_dump() for e in rest] == [e.model_dump() for e in whole[3:]]
    again = await client.responses.cancel(resp.id)  # a finished response: returned as it is
    assert again.status == "completed"


async def test_a_conversation_is_the_agents_session(client: openai.AsyncOpenAI, served: Served) -> None:
    first = await client.responses.create(model="helper", input="hello")
    assert first.conversation is None
    session = treadle_extra(first)["session_id"]
    second = await client.responses.create(model="helper", input="again", conversation=session)
    third = await client.responses.create(model="helper", input="and again", conversation={"id": session})
    runs = [treadle_extra(r)["run_id"] for r in (first, second, third)]
    assert (await served.http.get(f"/v1/sessions/{session}")).json()["runs"] == runs  # one session, in order
    assert second.conversation is not None and second.conversation.id == session
    retrieved = await client.responses.retrieve(third.id)
    assert retrieved.conversation is not None and retrieved.conversation.id == session

    create = client.responses.create
    refused = [
        await raised(openai.BadRequestError, create(model="helper", input="x", conversation="s_" + "0" * 32)),
        await raised(openai.BadRequestError, create(model="helper", input="x", conversation=session,
                                                    previous_response_id=first.id)),
        await raised(openai.BadRequestError, create(model="gpt", input="x", conversation=session)),
    ]
    assert [(e.code, e.param) for e in refused] == [
        (code, "conversation") for code in ("conversation_not_found", "invalid_value", "unsupported_parameter")]


async def test_a_running_background_response_is_cancelled(client: openai.AsyncOpenAI, served: Served) -> None:
    served.openai_fake.then(text("too late", first_byte_delay_s=SLOW_S))  # the run is inside its model call
    before = len(served.openai_fake.calls)
    resp = await client.responses.create(model="vendor-agent", input="take your time", background=True)
    run_id = treadle_extra(resp)["run_id"]
    await until(lambda: len(served.openai_fake.calls) > before, timeout=20, interval=0.02, what="the model call")
    cancelled = await client.responses.cancel(resp.id)
    assert cancelled.status == "cancelled" and cancelled.id == resp.id
    assert (await client.responses.retrieve(resp.id)).status == "cancelled"

    async def run_cancelled() -> bool:
        return bool((await served.http.get(f"/v1/runs/{run_id}")).json()["status"] == "cancelled")

    await until(run_cancelled, timeout=20, interval=0.05, what="the run cancelled")
    assert (await client.responses.cancel(resp.id)).status == "cancelled"  # again: as it is


async def test_the_sync_client_creates_streams_retrieves_resumes_and_cancels(served: Served) -> None:
    """The sync SDK (in a thread: it blocks while the server serves on this loop): a background
    response resumed with the `responses.stream(response_id=, starting_after=)` helper, and a
    running one cancelled."""

    def drive() -> dict[str, Any]:
        with openai.OpenAI(base_url=served.url + "/v1", api_key=TOKEN, max_retries=0) as c:
            out: dict[str, Any] = {}
            with c.responses.stream(model="echo-alias", input="sync stream") as stream:
                out["deltas"] = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
                out["streamed"] = stream.get_final_response()
            out["retrieved"] = c.responses.retrieve(out["streamed"].id)
            bg = c.responses.create(model="counter", input="count", background=True)
            whole = list(c.responses.retrieve(bg.id, stream=True))  # follows to the end
            with c.responses.stream(response_id=bg.id, starting_after=1) as resumed:
                out["resumed"] = [e.sequence_number for e in resumed]
                out["resumed_final"] = resumed.get_final_response()
            out["whole"] = [e.sequence_number for e in whole]
            slow = c.responses.create(model="vendor-agent", input="x", background=True)
            out["cancelled"] = c.responses.cancel(slow.id)
            return out

    served.openai_fake.then(text("too late", first_byte_delay_s=SLOW_S))
    out = await asyncio.to_thread(drive)
    assert out["deltas"] == "sync stream" and out["streamed"].output_text == "sync stream"
    got, streamed = out["retrieved"], out["streamed"]  # the helper's output texts add `parsed`
    assert (got.id, got.status, got.output_text, got.usage) == (streamed.id, "completed", "sync stream",
                                                                streamed.usage)
    assert out["whole"] == list(range(len(out["whole"]))) and out["resumed"] == out["whole"][2:]
    assert out["resumed_final"].status == "completed" and out["resumed_final"].output_text
    assert out["cancelled"].status == "cancelled"


#: the fields the Open Responses schema (openresponses.org) requires of every response, by type
OPEN_RESPONSES_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,), "object": (str,), "created_at": (int,), "completed_at": (int, type(None)), "status": (str,),
    "incomplete_details": (dict, type(None)), "model": (str,), "previous_response_id": (str, type(None)),
    "instructions": (str, type(None)), "output": (list,), "error": (dict, type(None)), "tools": (list,),
    "tool_choice": (str, dict), "truncation": (str,), "parallel_tool_calls": (bool,), "text": (dict,),
    "top_p": (float, int), "presence_penalty": (float, int), "frequency_penalty": (float, int),
    "top_logprobs": (int,), "temperature": (float, int), "reasoning": (dict, type(None)),
    "usage": (dict, type(None)), "max_output_tokens": (int, type(None)), "max_tool_calls": (int, type(None)),
    "store": (bool,), "background": (bool,), "service_tier": (str,), "metadata": (dict,),
    "safety_identifier": (str, type(None)), "prompt_cache_key": (str, type(None)),
}
#: every event a Responses stream may carry, as OpenAI's SDK types them
STREAM_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
#: a 1x1 PNG as a data: URL
PIXEL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQ"
         "AAAABJRU5ErkJggg==")


async def test_the_open_responses_acceptance_cases(served: Served) -> None:
    """The cases of the Open Responses acceptance suite (its runner is a Bun script in the spec's
    repository, not on a registry), asked as it asks them — plain HTTP, `input` as message items —
    and checked as it checks them: every field its schema requires, with its type (and each response
    and streamed event against OpenAI's published types); output; status
    completed; for streams every event numbered and the final response whole; for tools a
    function_call item added, its arguments' delta and done, the item done."""
    fake = served.openai_fake
    weather = {"type": "function", "name": "get_weather", "description": "The weather for a location",
               "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                              "required": ["location"]}}
    cases: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], bool]] = [
        ("basic", [{"type": "message", "role": "user", "content": "Say hello in three words."}], [], False),
        ("streaming", [{"type": "message", "role": "user", "content": "Count to 5."}], [], True),
        ("system prompt", [{"type": "message", "role": "system", "content": "Talk like a pirate."},
                           {"type": "message", "role": "user", "content": "Say hello."}], [], False),
        ("tool calling", [{"type": "message", "role": "user", "content": "Weather in San Francisco?"}],
         [weather], False),
        ("tool calling, streamed", [{"type": "message", "role": "user", "content": "Weather in San Francisco?"}],
         [weather], True),
        ("image input", [{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "What is in this image?"}, {"type": "input_image", "image_url": PIXEL}]}],
         [], False),
        ("multi-turn", [{"type": "message", "role": "user", "content": "My name is Alice."},
                        {"type": "message", "role": "assistant", "content": "Hello Alice!"},
                        {"type": "message", "role": "user", "content": "What is my name?"}], [], False),
    ]
    for name, items, fns, stream in cases:
        fake.then(tools(("get_weather", {"location": "San Francisco, CA"})) if fns else text("Ahoy ", "there."))
        body = {"model": "gpt", "input": items, "stream": stream, **({"tools": fns} if fns else {})}
        async with served.http.stream("POST", "/v1/responses", json=body) as resp:
            raw = (await resp.aread()).decode()
        assert resp.status_code == 200, (name, raw)
        events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")] if stream else []
        final = events[-1]["response"] if stream else json.loads(raw)
        wrong = {k: final.get(k, "<absent>") for k, kinds in OPEN_RESPONSES_FIELDS.items()
                 if k not in final or not isinstance(final[k], kinds)}
        assert wrong == {}, (name, wrong)
        assert final["output"] and final["status"] == "completed", (name, final)
        # the suite checks each response and event against its schemas (zod, made from OpenAI's
        # spec); here OpenAI's own published types (the SDK's pydantic models) check them
        OpenAIResponse.model_validate(final)
        for event in events:
            STREAM_EVENT.validate_python(event)
        if stream:
            assert [e["sequence_number"] for e in events] == list(range(len(events))), name
            assert all(e["response"].keys() >= OPEN_RESPONSES_FIELDS.keys() for e in events if "response" in e)
        if fns:
            assert any(o["type"] == "function_call" for o in final["output"]), name
            assert all(t.keys() == {"type", "name", "description", "parameters", "strict"} for t in final["tools"])
        if fns and stream:
            kinds = [(e["type"], e.get("item", {}).get("type")) for e in events]
            assert {("response.output_item.added", "function_call"), ("response.function_call_arguments.delta", None),
                    ("response.function_call_arguments.done", None),
                    ("response.output_item.done", "function_call")} <= set(kinds), (name, kinds)
    assert fake.violations == []
