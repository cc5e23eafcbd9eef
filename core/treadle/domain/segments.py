"""Prompt segments as loomcycle takes them on POST /v1/runs, and how they render for a model."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

UNTRUSTED_KINDS = frozenset(
    {
        "untrusted",
        "web_content",
        "uploaded_cv",
        "qa_question",
        "user_input",
        "tool_output",
        "search_result",
        "run_metadata",
    }
)


class TrustedText(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["trusted-text"]
    text: str
    cacheable: bool | None = None


class UntrustedBlock(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["untrusted-block"]
    kind: str = "untrusted"
    text: str

    @field_validator("kind")
    @classmethod
    def _normalize_kind(cls, v: str) -> str:
        return v if v in UNTRUSTED_KINDS else "untrusted"


SegmentBlock = Annotated[TrustedText | UntrustedBlock, Field(discriminator="type")]


class Segment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user"]
    content: list[SegmentBlock] = Field(min_length=1)


def render_block(block: dict[str, object]) -> str:
    """Trusted text verbatim; untrusted text fenced in <kind> tags with '<' escaped."""
    text = str(block.get("text", ""))
    if block.get("type") == "untrusted-block":
        kind = str(block.get("kind") or "untrusted")
        if kind not in UNTRUSTED_KINDS:
            kind = "untrusted"
        return f"<{kind}>\n{text.replace('<', '&lt;')}\n</{kind}>"
    return text


def split_segments(segments: list[dict[str, object]]) -> tuple[str, str]:
    """Flatten stored segments into (extra system text, one user message text)."""
    system_parts: list[str] = []
    user_parts: list[str] = []
    for seg in segments:
        blocks = seg.get("content") or []
        assert isinstance(blocks, list)
        rendered = [render_block(b) for b in blocks if isinstance(b, dict)]
        (system_parts if seg.get("role") == "system" else user_parts).extend(rendered)
    return "\n\n".join(system_parts), "\n\n".join(user_parts)
