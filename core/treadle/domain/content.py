"""The normalized content-block model (close to Anthropic's); providers translate it to their wire."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

Role = Literal["user", "assistant"]


@dataclass(slots=True)
class TextBlock:
    text: str
    type: Literal["text"] = "text"


@dataclass(slots=True)
class ToolUseBlock:
    id: str
    name: str
    input: dict[str, Any]
    type: Literal["tool_use"] = "tool_use"


@dataclass(slots=True)
class ToolResultBlock:
    tool_use_id: str
    content: str
    is_error: bool = False
    type: Literal["tool_result"] = "tool_result"


@dataclass(slots=True)
class ThinkingBlock:
    """Reasoning a model showed. `signature` and `source` (the reasoning format that produced it:
    "anthropic", "deepseek", "gemini") let a driver echo it back to the same kind of model; any
    other provider gets the transcript without it."""

    thinking: str
    signature: str | None = None
    type: Literal["thinking"] = "thinking"
    source: str | None = None


@dataclass(slots=True)
class ImageBlock:
    media_type: str
    data: str  # base64, no data: prefix
    type: Literal["image"] = "image"


Block = TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | ImageBlock


@dataclass(slots=True)
class Message:
    role: Role
    content: list[Block] = field(default_factory=list)

    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]


def content_chars(messages: list[Message]) -> int:
    """The characters of the messages' text, tool inputs (compact JSON) and tool results: what the
    token estimates divide by 4 (engine/compaction.py, the mock provider's usage)."""
    chars = 0
    for m in messages:
        for b in m.content:
            if isinstance(b, TextBlock):
                chars += len(b.text)
            elif isinstance(b, ToolResultBlock):
                chars += len(b.content)
            elif isinstance(b, ToolUseBlock):
                chars += len(orjson.dumps(b.input))
    return chars
