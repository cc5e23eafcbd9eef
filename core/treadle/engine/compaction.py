"""Context compaction, as loomcycle (its internal/loop/loop.go): what to summarize, what to keep, the
summary request, the compacted history. Pure functions; the step (engine/step.py) calls the model
and records a `context_compaction` event, and replay (engine/replay.py) rebuilds exactly the
compacted history from it — after a crash, on another worker, in the cloud shape.

The compacted history is `[user(<pinned task>? + <summary>), assistant(ack)] + kept tail`. The
kept tail starts at a *fresh user turn* (a user message that does not start with a tool_result),
so a tool_use is never separated from its tool_result (invariant 2); when the model's window is
known the tail is capped at half of it (estimated as characters / 4)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from treadle.config import CompactionConfig
from treadle.domain.content import Message, TextBlock, ToolResultBlock, ToolUseBlock, content_chars

DEFAULT_TARGET_PCT = 10
DEFAULT_KEEP_LAST_N = 4
DEFAULT_KEEP_FIRST = True
DEFAULT_AUTO_AT_PCT = 80
#: the kept-verbatim tail is capped at this percent of the model's window (when known)
KEPT_TAIL_BUDGET_PCT = 50
#: a manual compaction of fewer messages than this is a no-op (loomcycle's minCompactMessages)
MIN_COMPACT_MESSAGES = 4
PINNED_HEADER = "[Original task — preserved verbatim:]\n"
SUMMARY_HEADER = ("[Conversation so far, compacted to a summary — treat it as established context for "
                  "everything before this point:]\n\n")
ACK = "Understood — I'll continue from the summary above."
#: `ModelRequest.options["purpose"]` of the summary call (the mock provider answers it with a summary)
SUMMARY_PURPOSE = "compaction_summary"


@dataclass(frozen=True, slots=True)
class Settings:
    """The resolved settings (defaults applied), from agent < run < spawn merged."""

    enabled: bool = False
    target_percentage: int = DEFAULT_TARGET_PCT
    keep_last_n: int = DEFAULT_KEEP_LAST_N
    keep_first: bool = DEFAULT_KEEP_FIRST
    autocompact_at_pct: int = DEFAULT_AUTO_AT_PCT
    model: str | None = None

    @classmethod
    def resolve(cls, agent: CompactionConfig | None, *overs: Mapping[str, Any] | None) -> Settings:
        merged = agent or CompactionConfig()
        for over in overs:
            merged = merged.merged(over)
        d = merged.model_dump(exclude_none=True)
        return cls(**d)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"enabled": self.enabled, "target_percentage": self.target_percentage,
                               "keep_last_n": self.keep_last_n, "keep_first": self.keep_first,
                               "autocompact_at_pct": self.autocompact_at_pct}
        if self.model:
            out["model"] = self.model
        return out


def is_fresh_user_turn(m: Message) -> bool:
    """A user message that starts a turn (not one carrying tool results)."""
    return m.role == "user" and (not m.content or not isinstance(m.content[0], ToolResultBlock))


def split(msgs: list[Message], keep_last_n: int, keep_first: bool) -> tuple[int, int, bool]:
    """(first, cut, ok): summarize msgs[first:cut], keep msgs[cut:]. `first` is 1 when the first
    message (a fresh user turn) is pinned; `cut` snaps back to a fresh user turn keeping at least
    `keep_last_n` messages (none: everything after `first` is summarized). ok False: nothing to
    summarize."""
    n = len(msgs)
    first = 1 if keep_first and n > 0 and is_fresh_user_turn(msgs[0]) else 0
    if keep_last_n <= 0:
        cut = n
    else:
        target = n - keep_last_n
        if target <= first:
            return first, first, False
        cut = next((i for i in range(target, first, -1) if is_fresh_user_turn(msgs[i])), n)
    return first, cut, cut > first


def estimate_tokens(msgs: list[Message]) -> int:
    """characters / 4 over text, tool inputs and tool results (loomcycle's estimate)."""
    return content_chars(msgs) // 4


def cap_tail(msgs: list[Message], cut: int, window: int) -> int:
    """Move `cut` to later fresh user turns until the kept tail fits half the window (never past
    the last turn: one over-budget turn is kept rather than none). window ≤ 0: unchanged."""
    budget = window * KEPT_TAIL_BUDGET_PCT // 100
    if budget <= 0:
        return cut
    while cut < len(msgs) and estimate_tokens(msgs[cut:]) > budget:
        nxt = next((i for i in range(cut + 1, len(msgs)) if is_fresh_user_turn(msgs[i])), -1)
        if nxt < 0:
            break
        cut = nxt
    return cut


def summary_system(target_pct: int) -> str:
    if not 10 <= target_pct <= 50:
        target_pct = DEFAULT_TARGET_PCT
    return ("You are compacting a conversation to free up the model's context window. "
            f"Produce a single concise summary — aim for roughly {target_pct}% of the original length — that "
            "preserves the user's goals and constraints, decisions made, facts and values established, "
            "tool results that still matter, and any open threads or next steps. Write it as durable "
            "context the assistant can rely on to continue. Output ONLY the summary prose — no preamble.")


def summary_prompt(span: list[Message]) -> Message:
    """The span flattened into one user message, role-tagged (valid however the span alternates)."""
    lines: list[str] = []
    for m in span:
        for b in m.content:
            if isinstance(b, TextBlock) and b.text:
                lines.append(f"{m.role}: {b.text}\n\n")
            elif isinstance(b, ToolUseBlock):
                lines.append(f"{m.role} [tool_use {b.name}]: {orjson.dumps(b.input).decode()}\n\n")
            elif isinstance(b, ToolResultBlock):
                lines.append(f"{m.role} [tool_result]: {b.content}\n\n")
    return Message("user", [TextBlock("Conversation to compact:\n\n" + "".join(lines))])


def compacted(pinned: str, summary: str, tail: list[Message]) -> list[Message]:
    """The history after a compaction."""
    head = (PINNED_HEADER + pinned + "\n\n" if pinned.strip() else "") + SUMMARY_HEADER + summary
    return [Message("user", [TextBlock(head)]), Message("assistant", [TextBlock(ACK)]), *tail]


def apply(msgs: list[Message], summary: str, keep_n: int, keep_first: bool) -> list[Message]:
    """What a `context_compaction` event makes of the history it follows (replay, and the live step
    alike): the last `keep_n` messages kept, the first pinned when `keep_first`."""
    keep_n = max(0, min(keep_n, len(msgs)))
    pinned = msgs[0].text() if keep_first and msgs else ""
    return compacted(pinned, summary, msgs[len(msgs) - keep_n:])


@dataclass(frozen=True, slots=True)
class Plan:
    """A compaction to do: the span to summarize and what the event will record."""

    span: list[Message]
    keep_n: int
    keep_first: bool
    before_tokens: int
    #: the history as it will be, but for the summary (for after_tokens)
    pinned: str
    tail: list[Message]


def plan(msgs: list[Message], settings: Settings, window: int) -> Plan | None:
    """What to summarize and keep (None: nothing to summarize)."""
    first, cut, ok = split(msgs, settings.keep_last_n, settings.keep_first)
    if not ok:
        return None
    if window > 0:
        cut = cap_tail(msgs, cut, window)
    pinned = msgs[0].text() if first else ""
    return Plan(msgs[first:cut], len(msgs) - cut, first > 0, estimate_tokens(msgs), pinned, msgs[cut:])


def after_tokens(p: Plan, summary: str) -> int:
    return estimate_tokens(compacted(p.pinned, summary, p.tail))


def auto_due(settings: Settings, used: int, window: int, iteration: int, last_compaction_iteration: int) -> bool:
    """loomcycle's shouldAutoCompact: enabled, the window known, the previous iteration's input +
    cache tokens at or past autocompact_at_pct of it, and not the iteration right after a compaction."""
    if not settings.enabled or window <= 0 or used <= 0 or iteration <= last_compaction_iteration + 1:
        return False
    return used * 100 >= window * settings.autocompact_at_pct
