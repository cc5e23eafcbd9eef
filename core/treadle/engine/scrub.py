"""The outbound scrub: what a model is sent, with known secret values and secret-shaped strings
masked (treadle.security.redact). Copies, never edits the transcript; ids are left alone, so every
tool_use keeps its tool_result. Thinking blocks go back untouched: providers verify their
signatures."""

from __future__ import annotations

from typing import Any

from treadle.domain.content import Block, Message, TextBlock, ToolResultBlock, ToolUseBlock
from treadle.security.redact import SECRETS


def _scrub_value(value: Any) -> Any:
    if isinstance(value, str):
        return SECRETS.scrub_text(value)
    if isinstance(value, dict):
        return {k: _scrub_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_value(v) for v in value]
    return value


def _scrub_block(block: Block) -> Block:
    if isinstance(block, TextBlock):
        text = SECRETS.scrub_text(block.text)
        return block if text == block.text else TextBlock(text)
    if isinstance(block, ToolResultBlock):
        content = SECRETS.scrub_text(block.content)
        return block if content == block.content else ToolResultBlock(block.tool_use_id, content, block.is_error)
    if isinstance(block, ToolUseBlock):
        scrubbed = _scrub_value(block.input)
        return block if scrubbed == block.input else ToolUseBlock(block.id, block.name, scrubbed)
    return block


def scrub_messages(messages: list[Message]) -> list[Message]:
    if not SECRETS.enabled:
        return messages
    out: list[Message] = []
    for m in messages:
        content = [_scrub_block(b) for b in m.content]
        out.append(m if all(a is b for a, b in zip(content, m.content, strict=True)) else Message(m.role, content))
    return out


def scrub_key() -> object:
    """What `scrub_messages`'s output depends on besides the messages: whether the scrub is on and
    the known secret values (their generation tells when they changed)."""
    return (SECRETS.enabled, SECRETS.generation)
