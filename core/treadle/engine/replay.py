"""Replay a transcript (stored events, in seq order) into the messages a model is sent.

Rules (invariant 2 — a tool_use is never separated from its tool_result):
- `user_input` → a user message (segments flattened; system segments go to the system prompt);
- `text`, `thinking`, `tool_call` of one iteration → one assistant message;
- `tool_result`s → one user message answering the assistant turn before it, in that turn's
  tool_use order (whatever order the results were recorded in);
- tool_uses of the last assistant turn that have no result yet are `pending`: the step must run
  them before the model may be called again. Earlier unanswered tool_uses (only possible after a
  bug or manual edit) are answered with a synthetic error so the model never sees a lone tool_use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from treadle.domain.content import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from treadle.domain.segments import split_segments, user_images

ORPHAN_RESULT_TEXT = "error: this tool call was never answered (treadle replay)"


@dataclass(slots=True)
class Transcript:
    system_extra: str = ""
    messages: list[Message] = field(default_factory=list)
    pending: list[ToolUseBlock] = field(default_factory=list)
    iterations: int = 0
    usage: dict[str, int] = field(
        default_factory=lambda: {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
    )
    finished: bool = False
    #: tool_use_id → its first `tool_parked` record ({"kind","keys","deadline","extra"})
    parked: dict[str, dict[str, Any]] = field(default_factory=dict)


def replay(events: list[tuple[int, str, dict[str, Any]]]) -> Transcript:
    t = Transcript()
    system_parts: list[str] = []
    assistant: Message | None = None  # the assistant turn being assembled
    assistant_iter: object = None
    results: dict[str, ToolResultBlock] = {}  # answers to `assistant`'s tool_uses

    def close_turn(final: bool) -> None:
        nonlocal assistant, assistant_iter, results
        if assistant is None:
            return
        uses = assistant.tool_uses()
        t.messages.append(assistant)
        answered: list[Block] = []
        missing: list[ToolUseBlock] = []
        for tu in uses:
            r = results.get(tu.id)
            if r is not None:
                answered.append(r)
            else:
                missing.append(tu)
        if missing and final:
            t.pending = missing
        else:
            answered.extend(ToolResultBlock(tu.id, ORPHAN_RESULT_TEXT, True) for tu in missing)
        if answered:
            t.messages.append(Message("user", answered))
        assistant, assistant_iter, results = None, None, {}

    for _seq, etype, payload in events:
        if etype == "user_input":
            close_turn(final=False)
            segs = payload.get("segments") or []
            sys_text, user_text = split_segments(segs if isinstance(segs, list) else [])
            if sys_text:
                system_parts.append(sys_text)
            images: list[Block] = [ImageBlock(mt, data) for mt, data in
                                   user_images(segs if isinstance(segs, list) else [])]
            if user_text or images:
                t.messages.append(Message("user", [*([TextBlock(user_text)] if user_text else []), *images]))
        elif etype in ("text", "thinking", "tool_call"):
            iteration = payload.get("iteration")
            if assistant is None or results or iteration != assistant_iter:
                close_turn(final=False)
                assistant, assistant_iter = Message("assistant"), iteration
            if etype == "text":
                assistant.content.append(TextBlock(str(payload.get("text", ""))))
            elif etype == "thinking":
                assistant.content.append(
                    ThinkingBlock(
                        str(payload.get("text", "")), payload.get("signature"), source=payload.get("source")
                    )
                )
            else:
                tu = payload.get("tool_use") or {}
                assistant.content.append(
                    ToolUseBlock(str(tu.get("id")), str(tu.get("name")), dict(tu.get("input") or {}))
                )
        elif etype == "tool_result":
            tu = payload.get("tool_use") or {}
            tid = str(tu.get("id"))
            if assistant is not None and any(u.id == tid for u in assistant.tool_uses()):
                results[tid] = ToolResultBlock(tid, str(payload.get("text", "")), bool(payload.get("is_error")))
        elif etype == "usage":
            t.iterations += 1
            usage = payload.get("usage") or {}
            for k in t.usage:
                v = usage.get(k)
                if isinstance(v, int):
                    t.usage[k] += v
        elif etype == "tool_parked":
            tu = payload.get("tool_use") or {}
            wait = payload.get("wait")
            if isinstance(wait, dict):
                t.parked.setdefault(str(tu.get("id")), wait)
        elif etype in ("done", "error"):
            t.finished = True
    close_turn(final=True)
    t.system_extra = "\n\n".join(system_parts)
    return t
