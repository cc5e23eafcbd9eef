"""Prompt segments as loomcycle takes them on POST /v1/runs, and how they render for a model."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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
    model_config = ConfigDict(extra="forbid", defer_build=True)
    type: Literal["trusted-text"]
    text: str
    cacheable: bool | None = None


class UntrustedBlock(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    type: Literal["untrusted-block"]
    kind: str = "untrusted"
    text: str

    @field_validator("kind")
    @classmethod
    def _normalize_kind(cls, v: str) -> str:
        return v if v in UNTRUSTED_KINDS else "untrusted"


class ImageContent(BaseModel):
    """An image for the model (user segments only): base64 data without a `data:` prefix."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    type: Literal["image"]
    media_type: Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
    data: str = Field(min_length=1, max_length=16 << 20)

    @field_validator("data")
    @classmethod
    def _base64(cls, v: str) -> str:
        try:
            base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("data must be base64 (no data: prefix)") from None
        return v


SegmentBlock = Annotated[TrustedText | UntrustedBlock | ImageContent, Field(discriminator="type")]


class Segment(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    role: Literal["system", "user"]
    content: list[SegmentBlock] = Field(min_length=1)

    @model_validator(mode="after")
    def _images_from_the_user(self) -> Segment:
        if self.role != "user" and any(isinstance(b, ImageContent) for b in self.content):
            raise ValueError("image blocks are allowed in user segments only")
        return self


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
        rendered = [render_block(b) for b in blocks if isinstance(b, dict) and b.get("type") != "image"]
        (system_parts if seg.get("role") == "system" else user_parts).extend(rendered)
    return "\n\n".join(system_parts), "\n\n".join(user_parts)


def user_images(segments: list[dict[str, object]]) -> list[tuple[str, str]]:
    """(media_type, base64 data) of the image blocks of user segments, in order."""
    out: list[tuple[str, str]] = []
    for seg in segments:
        blocks = seg.get("content") if seg.get("role") == "user" else None
        for b in blocks if isinstance(blocks, list) else []:
            if isinstance(b, dict) and b.get("type") == "image":
                out.append((str(b.get("media_type")), str(b.get("data"))))
    return out
