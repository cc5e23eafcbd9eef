"""Structured output and tool choice for a direct model call (Chat Completions' `response_format`
and `tool_choice`): what clients such as LangChain's `with_structured_output()` and
`bind_tools(tool_choice="required")` send by default.

Why here and not only in the providers: treadle routes one `model` to vendors with different
powers (OpenAI takes `response_format` natively, Anthropic `tool_choice` natively, the mock
neither). So the wish is sent natively where the driver can (as `options`), stated as an
instruction in the system text for `response_format`, and always *checked* on the answer: an answer
that misses is retried once with the problem named, and a second miss is a `502
structured_output_unmet` rather than an answer that silently breaks the client's parser."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from treadle.domain.content import Block, TextBlock, ToolUseBlock

#: a ```json … ``` fence some models put around a JSON answer (removed before validation)
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n?```\s*$", re.DOTALL)


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = Field(default=None, max_length=8192)
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    def wire(self) -> dict[str, Any]:
        """The format as OpenAI's wire carries it (sent natively to an `openai` driver)."""
        return self.model_dump(by_alias=True, exclude_none=True)


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64)


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: NamedFunction


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


class Wish:
    """What the request asks of the answer: a JSON shape, and which tool calls it must (not) hold."""

    def __init__(self, fmt: ResponseFormat | None, choice: ToolChoice | None, parallel: bool | None = None,
                 effort: str | None = None, strict_tools: dict[str, dict[str, Any]] | None = None) -> None:
        self.fmt = fmt if fmt is not None and fmt.type in ("json_object", "json_schema") else None
        self.single_call = parallel is False  # parallel_tool_calls: false — at most one call per answer
        self.effort = effort  # reasoning effort: sent as the providers' `effort` option (not checked)
        self.strict_tools = strict_tools or {}  # strict function tools: name → parameters schema
        self.choice: str | None = None  # none | required | <function name>; None = auto
        if isinstance(choice, NamedToolChoice):
            self.choice = "fn:" + choice.function.name
        elif choice in ("none", "required"):
            self.choice = choice

    @property
    def active(self) -> bool:
        return self.fmt is not None or self.choice is not None or self.single_call or bool(self.strict_tools)

    def options(self) -> dict[str, Any]:
        """`options` for the providers: `tool_choice` (none | required | {"name": n}) and
        `response_format` (OpenAI's wire shape); a driver that cannot apply them leaves them."""
        out: dict[str, Any] = {}
        if self.choice is not None:
            out["tool_choice"] = {"name": self.choice[3:]} if self.choice.startswith("fn:") else self.choice
        if self.fmt is not None:
            out["response_format"] = self.fmt.wire()
        if self.single_call:
            out["parallel_tool_calls"] = False
        if self.effort is not None:
            out["effort"] = self.effort
        return out

    def instruction(self) -> str:
        """System text asking for the format (for vendors that do not take it natively)."""
        if self.fmt is None:
            return ""
        text = "Answer with one JSON object only: no prose before or after it, no code fences."
        if self.fmt.json_schema is not None:
            text += (" The object must conform to this JSON Schema:\n"
                     + json.dumps(self.fmt.json_schema.schema_, separators=(",", ":")))
        return text

    def check(self, content: list[Block]) -> tuple[list[Block], str | None]:
        """(the answer with a JSON text normalized, the problem or None)."""
        uses = [b for b in content if isinstance(b, ToolUseBlock)]
        if self.choice == "none" and uses:
            return content, "tool_choice is none: answer in text and call no tool."
        if self.single_call and len(uses) > 1:
            return content, "parallel_tool_calls is false: call at most one tool in this answer."
        if self.choice == "required" and not uses:
            return content, "tool_choice is required: answer by calling one of the tools."
        if self.choice is not None and self.choice.startswith("fn:"):
            name = self.choice[3:]
            if not uses or any(b.name != name for b in uses):
                return content, f"tool_choice names the function {name}: answer by calling {name} (only)."
        for b in uses:
            schema = self.strict_tools.get(b.name)
            if schema is not None:
                from jsonschema import Draft202012Validator

                errors = sorted(Draft202012Validator(schema).iter_errors(b.input), key=str)
                if errors:
                    where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
                    return content, (f"The arguments of {b.name} do not conform to its parameters schema at "
                                     f"{where}: {errors[0].message}. Call it again with valid arguments.")
        if self.fmt is None or uses:
            return content, None
        text = "".join(b.text for b in content if isinstance(b, TextBlock))
        m = _FENCE.match(text)
        raw = m.group(1) if m else text.strip()
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as exc:
            return content, f"The answer is not valid JSON ({exc.msg} at character {exc.pos}). {self.instruction()}"
        if not isinstance(doc, dict):
            return content, f"The answer must be a JSON object, not {type(doc).__name__}. {self.instruction()}"
        if self.fmt.json_schema is not None:
            from jsonschema import Draft202012Validator

            errors = sorted(Draft202012Validator(self.fmt.json_schema.schema_).iter_errors(doc), key=str)
            if errors:
                where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
                return content, (f"The JSON does not conform to the schema at {where}: {errors[0].message}. "
                                 f"{self.instruction()}")
        rest = [b for b in content if not isinstance(b, TextBlock)]
        return [TextBlock(raw), *rest], None


def schema_problem(fmt: ResponseFormat | None) -> str | None:
    """Why the request's format cannot be used (a json_schema without its schema, or an invalid one)."""
    if fmt is None:
        return None
    if fmt.type == "json_schema" and fmt.json_schema is None:
        return "response_format of type json_schema needs json_schema"
    if fmt.type != "json_schema" and fmt.json_schema is not None:
        return "json_schema applies only to response_format of type json_schema"
    if fmt.json_schema is not None:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        try:
            Draft202012Validator.check_schema(fmt.json_schema.schema_)
        except SchemaError as exc:
            return f"json_schema.schema is not a valid JSON Schema: {exc.message}"
    return None
