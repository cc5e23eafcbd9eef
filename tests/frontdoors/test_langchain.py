"""LangChain's OpenAI chat model (`langchain-openai`) against a served treadle, as its users call
it by default: `with_structured_output(Model)` (a strict json_schema response_format),
`bind_tools(..., tool_choice="required")`, and `use_responses_api=True` (the Responses API)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from tests.support.frontdoors import TOKEN, Served
from tests.support.vendors.base import text, tools

langchain_openai = pytest.importorskip("langchain_openai")


class City(BaseModel):
    """A city and its population."""

    name: str
    population: int


def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


def chat(served: Served, model: str, **kw: Any) -> Any:
    return langchain_openai.ChatOpenAI(model=model, base_url=served.url + "/v1", api_key=TOKEN, max_retries=0, **kw)


async def test_with_structured_output(served: Served) -> None:
    served.anthropic_fake.then(text('{"name": "Oslo", "population": 709000}'))
    city = await chat(served, "claude").with_structured_output(City).ainvoke("biggest city in Norway?")
    assert city == City(name="Oslo", population=709000)
    assert "JSON Schema" in served.anthropic_fake.calls[-1]["system"][0]["text"]  # sent as a json_schema format
    served.openai_fake.then(text('{"name": "Bergen", "population": 291000}'))
    city = await chat(served, "gpt").with_structured_output(City, method="json_mode").ainvoke("second city? JSON")
    assert city == City(name="Bergen", population=291000)
    assert served.openai_fake.calls[-1]["response_format"] == {"type": "json_object"}


async def test_bind_tools_with_tool_choice_required(served: Served) -> None:
    served.openai_fake.then(tools(("get_weather", {"city": "Oslo"})))
    msg = await chat(served, "gpt").bind_tools([get_weather], tool_choice="required").ainvoke("weather in Oslo?")
    assert [(c["name"], c["args"]) for c in msg.tool_calls] == [("get_weather", {"city": "Oslo"})]
    assert served.openai_fake.calls[-1]["tool_choice"] == "required"


async def test_use_responses_api(served: Served) -> None:
    served.openai_fake.then(text("Hello ", "from the Responses API."))
    msg = await chat(served, "gpt", use_responses_api=True).ainvoke("hi")
    assert msg.text == "Hello from the Responses API."
    served.openai_fake.then(tools(("get_weather", {"city": "Rome"})))
    msg = await chat(served, "gpt", use_responses_api=True).bind_tools([get_weather]).ainvoke("weather in Rome?")
    assert [(c["name"], c["args"]) for c in msg.tool_calls] == [("get_weather", {"city": "Rome"})]
