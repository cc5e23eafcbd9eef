"""The event catalogue: every type a run's transcript (and its live stream) can carry.

A run is an append-only list of events (docs/architecture.md: the transcript is the state). Each event has a
`type` from `EventType` and a JSON payload. The events the engine itself writes have a frozen
class here with a literal `type`, `to_payload()` and `parse()`; emitters build them with
`.event()` and readers compare against `EventType` members, never against a bare string, so a
search for a member finds every reader and writer of an event (a test checks that no module
outside this one compares an event type with a string literal).

`docs/events.md` is generated from `CATALOGUE` (`python -m treadle.domain.events > docs/events.md`;
a test fails when the file is stale).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal

from treadle.domain.runs import NewEvent


class EventType(StrEnum):
    # the run's start and its user turns
    USER_INPUT = "user_input"
    STARTED = "started"
    # the assistant's turn
    TEXT = "text"
    THINKING = "thinking"
    TOOL_CALL = "tool_call"
    USAGE = "usage"
    RETRY = "retry"
    PROVIDER_FALLBACK = "provider_fallback"
    REASONING_INVALIDATED = "reasoning_invalidated"
    FALLBACK_SUPPRESSED = "fallback_suppressed"
    # tool results and parks
    TOOL_RESULT = "tool_result"
    TOOL_PARKED = "tool_parked"
    TOOL_PENDING = "tool_pending"
    INTERRUPTION_PENDING = "interruption_pending"
    INTERRUPTION_NOTIFY = "interruption_notify"
    CHANNEL_PUBLISH = "channel_publish"
    CHANNEL_DELIVERY = "channel_delivery"
    SPAWN_CHILD_RESULT = "spawn_child_result"
    # a replay fork's first call that runs for real (engine/forkreplay.py)
    REPLAY_DIVERGED = "replay_diverged"
    # interactive runs
    AWAITING_INPUT = "awaiting_input"
    TURN_CANCELLED = "turn_cancelled"
    # budgets (governance/budgets.py)
    LIMIT = "limit"
    # context compaction (engine/compaction.py)
    CONTEXT_COMPACTION = "context_compaction"
    COMPACTION_FAILED = "compaction_failed"
    # the runtime's pause
    RUNTIME_PAUSED = "runtime_paused"
    # endings
    DONE = "done"
    ERROR = "error"
    # live only (never stored): streamed while the model answers, and the stream's own frames
    TEXT_DELTA = "text_delta"
    THINKING_DELTA = "thinking_delta"
    STEER = "steer"
    SESSION = "session"
    AGENT = "agent"


#: what each type means and the payload fields it carries (the source of docs/events.md)
CATALOGUE: dict[EventType, str] = {
    EventType.USER_INPUT: "a user turn: `segments` (role + content), `input_id` and `source: steer` when it "
    "came through the steering queue",
    EventType.STARTED: "the run started: `agent`, `def_id`, options as the caller gave them",
    EventType.TEXT: "the assistant's text of one iteration: `text`, `iteration`",
    EventType.THINKING: "the assistant's reasoning: `text`, `signature`, `iteration`, `source`?",
    EventType.TOOL_CALL: "a tool call the model made: `tool_use` {`id`, `name`, `input`}, `iteration`",
    EventType.USAGE: "one model call's tokens: `usage` {input/output/cache tokens, `model`, `provider`, "
    "`max_context_tokens`?}, `iteration`",
    EventType.RETRY: "a provider call failed and is retried: `retry` {attempt, wait, error, provider}",
    EventType.PROVIDER_FALLBACK: "the route moved to its next candidate: `fallback` {`failed_provider`, "
    "`failed_model`, `new_provider`, `new_model`, `attempt`, `tier`, `reason`, `cause_error`}, `iteration`",
    EventType.REASONING_INVALIDATED: "a call moved to a provider that cannot read the run's earlier reasoning, "
    "which was left out of what it was sent: `text`, `provider`, `model`, `dropped` (blocks), `iteration`",
    EventType.FALLBACK_SUPPRESSED: "a run pinned to its provider (`pin_after_success`) did not fall back when "
    "that provider failed: `text`, `provider`, `model`, `reason`, `iteration`",
    EventType.TOOL_RESULT: "a tool call's answer: `tool_use`, `text`, `is_error` (unique per tool_use_id); "
    "`replayed` {`run_id`, `seq`} when a replay fork answered it from the original run's result at `seq` "
    "(the tool did not run)",
    EventType.TOOL_PARKED: "a tool call parked the run: `tool_use`, `wait` {kind, keys, deadline, extra}, "
    "`iteration`",
    EventType.TOOL_PENDING: "an application tool call waits for the caller's answer (`tool_results` route)",
    EventType.INTERRUPTION_PENDING: "the agent asked a question (Interruption) and waits for the answer",
    EventType.INTERRUPTION_NOTIFY: "the agent notified the operator (Interruption notify)",
    EventType.CHANNEL_PUBLISH: "the agent published on a channel: `channel` {name, id, payload_preview}",
    EventType.CHANNEL_DELIVERY: "a channel subscription took a message: `channel` {`channel`, `message_id`, `scope`, "
    "`scope_id`, `cursor`, `payload_preview`}",
    EventType.SPAWN_CHILD_RESULT: "a sub-agent's result reached its parent: `spawn_child`",
    EventType.REPLAY_DIVERGED: "a replay fork's call did not match the original's record: it and every later "
    "call run for real. `index` (the fork's call number, from 0), `got` {`name`, `input`}, `want` {`name`, "
    "`input`} (the original's call; null past its record), `reason` (mismatch, end_of_record, not_held), "
    "`run_id` (the original)",
    EventType.AWAITING_INPUT: "an interactive run ended its turn and waits for input: `since_turn`",
    EventType.TURN_CANCELLED: "a turn was cancelled: `reason`, `since_turn`, `input_id`",
    EventType.LIMIT: "a budget was crossed (loomcycle's shape): `limit` {`scope` (tenant, user, agent), "
    "`scope_id`, `severity` (soft: the run goes on; hard: it stops), `window`, `used`, `limit`, `metric`, "
    "`currency`?}, `iteration`",
    EventType.CONTEXT_COMPACTION: "the history was compacted (loomcycle's marker): `summary`, `keep_n` (messages "
    "kept verbatim), `keep_first` (the first user message pinned), `before_tokens`, `after_tokens` (estimates), "
    "`trigger` (auto, self, manual), `iteration` (the one it preceded), `input_id`? (a manual compaction of a "
    "parked run, through the steering queue); replay rebuilds the compacted history",
    EventType.COMPACTION_FAILED: "a compaction's summary call failed (or a manual one found the history moved); "
    "the history is unchanged: `error`, `trigger`, `iteration`, `input_id`?",
    EventType.DONE: "the run ended: `stop_reason` (end_turn, max_iterations, cancelled, budget_exceeded), "
    "`usage` totals, `reason`? (cancel)",
    EventType.RUNTIME_PAUSED: "the runtime was paused (`POST /v1/_pause`): the run parked at an iteration "
    "boundary, `since_turn` iterations done; a resume continues it where it was",
    EventType.ERROR: "the run failed: `code`, `error` and details",
    EventType.TEXT_DELTA: "live only: a piece of text while the model answers: `text`, `iteration`, "
    "`attempt`, `provider`",
    EventType.THINKING_DELTA: "live only: a piece of reasoning while the model answers",
    EventType.STEER: "live only (loomcycle's frame): a steered `user_input` as the stream shows it",
    EventType.SESSION: "live only (loomcycle's frame): the stream's first frame, naming the run and session",
    EventType.AGENT: "live only (loomcycle's frame): the agent the run started",
}

#: the types a run's stream shows but its transcript never stores
LIVE_ONLY: frozenset[EventType] = frozenset({EventType.TEXT_DELTA, EventType.THINKING_DELTA, EventType.STEER,
                                             EventType.SESSION, EventType.AGENT})
#: the types that end a run
TERMINAL: frozenset[EventType] = frozenset({EventType.DONE, EventType.ERROR})


#: a model's streamed delta kind (providers' `DeltaSink`: "text" | "thinking") → its live frame's type
DELTA_OF: dict[str, EventType] = {"text": EventType.TEXT_DELTA, "thinking": EventType.THINKING_DELTA}


def sql_in(*types: EventType) -> str:
    """`types` as a SQL list, `('a', 'b')`, for a query's `type IN …` (store/): the values are the
    catalogue's own, never a caller's, so the text is safe to inline and the statement stays the
    same text (a prepared statement, a stable plan)."""
    return "(" + ", ".join(f"'{t.value}'" for t in types) + ")"


def render_js() -> str:
    """The catalogue as the web page reads it: api/watch/events.js, loaded before watch.js (and
    required by it under node), so that the page compares event types with `EVENTS.X`, never with
    a bare string (tests/unit/test_event_catalogue.py checks the page's scripts, and that the file
    is this text: `python -m treadle.domain.events js > core/treadle/api/watch/events.js`)."""
    members = "".join(f"  {e.name}: {json.dumps(e.value)},\n" for e in EventType)
    return ("// generated from core/treadle/domain/events.py: the run events' types\n"
            "// (python -m treadle.domain.events js > core/treadle/api/watch/events.js)\n"
            f"\"use strict\";\n\nconst EVENT_TYPES = Object.freeze({{\n{members}}});\n"
            "if (typeof module !== \"undefined\") module.exports = { EVENTS: EVENT_TYPES };\n")


def is_type(etype: str, *types: EventType) -> bool:
    """Whether the stored type `etype` is one of `types`."""
    return etype in types


# -- the engine's own events, typed -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Typed:
    type: ClassVar[EventType]

    def to_payload(self) -> dict[str, Any]:
        """The stored payload: the fields that are set, shallow (`dataclasses.asdict` would deep-copy
        every value, on the step's hot path)."""
        # `__match_args__`: the dataclass's field names, made once per class (`fields()` builds
        # its tuple on every call)
        names: tuple[str, ...] = self.__match_args__
        return {name: v for name in names if (v := getattr(self, name)) is not None}

    def event(self, tool_use_id: str | None = None) -> NewEvent:
        return NewEvent(self.type, self.to_payload(), tool_use_id=tool_use_id)


@dataclass(frozen=True, slots=True)
class ToolUseRef:
    id: str
    name: str
    input: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "input": self.input}

    @classmethod
    def parse(cls, d: dict[str, Any]) -> ToolUseRef:
        return cls(str(d["id"]), str(d["name"]), dict(d.get("input") or {}))


@dataclass(frozen=True, slots=True)
class Text(_Typed):
    type: ClassVar[EventType] = EventType.TEXT
    text: str
    iteration: int

    @classmethod
    def parse(cls, p: dict[str, Any]) -> Text:
        return cls(str(p.get("text", "")), int(p.get("iteration") or 0))


@dataclass(frozen=True, slots=True)
class Thinking(_Typed):
    type: ClassVar[EventType] = EventType.THINKING
    text: str
    signature: str | None
    iteration: int
    source: str | None = None

    def to_payload(self) -> dict[str, Any]:  # `signature` is always written, even when null
        p: dict[str, Any] = {"text": self.text, "signature": self.signature, "iteration": self.iteration}
        if self.source:
            p["source"] = self.source
        return p

    @classmethod
    def parse(cls, p: dict[str, Any]) -> Thinking:
        return cls(str(p.get("text", "")), p.get("signature"), int(p.get("iteration") or 0), p.get("source"))


@dataclass(frozen=True, slots=True)
class ToolCall(_Typed):
    type: ClassVar[EventType] = EventType.TOOL_CALL
    tool_use: ToolUseRef
    iteration: int

    def to_payload(self) -> dict[str, Any]:
        return {"tool_use": self.tool_use.to_json(), "iteration": self.iteration}

    @classmethod
    def parse(cls, p: dict[str, Any]) -> ToolCall:
        return cls(ToolUseRef.parse(p["tool_use"]), int(p.get("iteration") or 0))


@dataclass(frozen=True, slots=True)
class Usage(_Typed):
    type: ClassVar[EventType] = EventType.USAGE
    usage: dict[str, Any]
    iteration: int

    def tokens(self) -> dict[str, int]:
        """The integer counts (model and provider names left out)."""
        return {k: v for k, v in self.usage.items() if isinstance(v, int) and not isinstance(v, bool)}

    @classmethod
    def parse(cls, p: dict[str, Any]) -> Usage:
        return cls(dict(p.get("usage") or {}), int(p.get("iteration") or 0))


@dataclass(frozen=True, slots=True)
class ToolResult(_Typed):
    type: ClassVar[EventType] = EventType.TOOL_RESULT
    tool_use: ToolUseRef
    text: str
    is_error: bool
    #: a replay fork's call answered from the original's result: {run_id, seq} (the tool did not run)
    replayed: dict[str, Any] | None = None

    def to_payload(self) -> dict[str, Any]:
        out = {"tool_use": self.tool_use.to_json(), "text": self.text, "is_error": self.is_error}
        if self.replayed is not None:
            out["replayed"] = self.replayed
        return out

    def event(self, tool_use_id: str | None = None) -> NewEvent:
        return NewEvent(self.type, self.to_payload(), tool_use_id=tool_use_id or self.tool_use.id)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> ToolResult:
        replayed = p.get("replayed")
        return cls(ToolUseRef.parse(p["tool_use"]), str(p.get("text", "")), bool(p.get("is_error")),
                   dict(replayed) if isinstance(replayed, dict) else None)


@dataclass(frozen=True, slots=True)
class ReplayDiverged(_Typed):
    type: ClassVar[EventType] = EventType.REPLAY_DIVERGED
    #: the original run
    run_id: str
    #: the fork's call number (from 0) that did not match
    index: int
    got: dict[str, Any]
    #: the original's call at `index` (None past its record)
    want: dict[str, Any] | None
    reason: Literal["mismatch", "end_of_record", "not_held"]

    def to_payload(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "index": self.index, "got": self.got, "want": self.want,
                "reason": self.reason}

    @classmethod
    def parse(cls, p: dict[str, Any]) -> ReplayDiverged:
        want, reason = p.get("want"), p.get("reason")
        return cls(str(p.get("run_id") or ""), int(p.get("index") or 0), dict(p.get("got") or {}),
                   dict(want) if isinstance(want, dict) else None,
                   reason if reason in ("mismatch", "end_of_record", "not_held") else "mismatch")


@dataclass(frozen=True, slots=True)
class ToolParked(_Typed):
    type: ClassVar[EventType] = EventType.TOOL_PARKED
    tool_use: ToolUseRef
    wait: dict[str, Any]
    iteration: int

    def to_payload(self) -> dict[str, Any]:  # `wait.deadline` is written even when null
        return {"tool_use": self.tool_use.to_json(), "wait": self.wait, "iteration": self.iteration}

    @classmethod
    def parse(cls, p: dict[str, Any]) -> ToolParked:
        return cls(ToolUseRef.parse(p["tool_use"]), dict(p.get("wait") or {}), int(p.get("iteration") or 0))


@dataclass(frozen=True, slots=True)
class AwaitingInput(_Typed):
    type: ClassVar[EventType] = EventType.AWAITING_INPUT
    since_turn: int

    @classmethod
    def parse(cls, p: dict[str, Any]) -> AwaitingInput:
        return cls(int(p.get("since_turn") or 0))


@dataclass(frozen=True, slots=True)
class TurnCancelled(_Typed):
    type: ClassVar[EventType] = EventType.TURN_CANCELLED
    reason: str
    since_turn: int
    input_id: int

    @classmethod
    def parse(cls, p: dict[str, Any]) -> TurnCancelled:
        return cls(str(p.get("reason") or ""), int(p.get("since_turn") or 0), int(p.get("input_id") or 0))


@dataclass(frozen=True, slots=True)
class RuntimePaused(_Typed):
    type: ClassVar[EventType] = EventType.RUNTIME_PAUSED
    since_turn: int

    @classmethod
    def parse(cls, p: dict[str, Any]) -> RuntimePaused:
        return cls(int(p.get("since_turn") or 0))


@dataclass(frozen=True, slots=True)
class UserInput(_Typed):
    type: ClassVar[EventType] = EventType.USER_INPUT
    segments: list[dict[str, Any]]
    input_id: int | None = None
    source: Literal["steer"] | None = None

    @classmethod
    def steer(cls, text: str, input_id: int) -> UserInput:
        return cls([{"role": "user", "content": [{"type": "trusted-text", "text": text}]}], input_id, "steer")

    @classmethod
    def parse(cls, p: dict[str, Any]) -> UserInput:
        return cls(list(p.get("segments") or []), p.get("input_id"), p.get("source"))


@dataclass(frozen=True, slots=True)
class LimitCrossed(_Typed):
    """A budget crossed at an iteration boundary: `limit` is `Breach.info()` (governance/budgets.py)."""

    type: ClassVar[EventType] = EventType.LIMIT
    limit: dict[str, Any]
    iteration: int

    @classmethod
    def parse(cls, p: dict[str, Any]) -> LimitCrossed:
        return cls(dict(p.get("limit") or {}), int(p.get("iteration") or 0))


@dataclass(frozen=True, slots=True)
class Done(_Typed):
    type: ClassVar[EventType] = EventType.DONE
    stop_reason: str
    usage: dict[str, int] = field(default_factory=dict)
    reason: str | None = None

    def to_payload(self) -> dict[str, Any]:
        p: dict[str, Any] = {"stop_reason": self.stop_reason}
        if self.reason is not None:
            p["reason"] = self.reason
        p["usage"] = self.usage
        return p

    @classmethod
    def parse(cls, p: dict[str, Any]) -> Done:
        return cls(str(p.get("stop_reason") or ""), dict(p.get("usage") or {}), p.get("reason"))


@dataclass(frozen=True, slots=True)
class Error(_Typed):
    type: ClassVar[EventType] = EventType.ERROR
    code: str
    error: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_payload(self) -> dict[str, Any]:
        return {**self.details, "code": self.code, "error": self.error}

    @classmethod
    def parse(cls, p: dict[str, Any]) -> Error:
        details = {k: v for k, v in p.items() if k not in ("code", "error")}
        return cls(str(p.get("code") or ""), str(p.get("error") or ""), details)


@dataclass(frozen=True, slots=True)
class ContextCompaction(_Typed):
    type: ClassVar[EventType] = EventType.CONTEXT_COMPACTION
    summary: str
    keep_n: int
    keep_first: bool
    before_tokens: int
    after_tokens: int
    trigger: str
    iteration: int = 0
    #: the steering-queue item it came from (a manual compaction of a parked run)
    input_id: int | None = None

    @classmethod
    def parse(cls, p: dict[str, Any]) -> ContextCompaction:
        input_id = p.get("input_id")
        return cls(str(p.get("summary") or ""), max(0, int(p.get("keep_n") or 0)), bool(p.get("keep_first")),
                   int(p.get("before_tokens") or 0), int(p.get("after_tokens") or 0), str(p.get("trigger") or ""),
                   int(p.get("iteration") or 0), input_id if isinstance(input_id, int) else None)


@dataclass(frozen=True, slots=True)
class CompactionFailed(_Typed):
    type: ClassVar[EventType] = EventType.COMPACTION_FAILED
    error: str
    trigger: str
    iteration: int = 0
    input_id: int | None = None

    @classmethod
    def parse(cls, p: dict[str, Any]) -> CompactionFailed:
        input_id = p.get("input_id")
        return cls(str(p.get("error") or ""), str(p.get("trigger") or ""), int(p.get("iteration") or 0),
                   input_id if isinstance(input_id, int) else None)


TypedEvent = (Text | Thinking | ToolCall | Usage | ToolResult | ToolParked | AwaitingInput | TurnCancelled
              | UserInput | LimitCrossed | Done | Error | ContextCompaction | CompactionFailed | RuntimePaused
              | ReplayDiverged)

_PARSERS: dict[str, Any] = {
    cls.type: cls.parse
    for cls in (Text, Thinking, ToolCall, Usage, ToolResult, ToolParked, AwaitingInput, TurnCancelled,
                UserInput, LimitCrossed, Done, Error, ContextCompaction, CompactionFailed, RuntimePaused,
                ReplayDiverged)
}


def parse(etype: str, payload: dict[str, Any]) -> TypedEvent | None:
    """The typed event for a stored one (None for a type without a class here)."""
    parser = _PARSERS.get(etype)
    return parser(payload) if parser is not None else None


def render_markdown() -> str:
    """docs/events.md, from the catalogue."""
    lines = [
        "# Run events",
        "",
        "Generated from `core/treadle/domain/events.py` (`python -m treadle.domain.events > docs/events.md`).",
        "Every event a run's transcript (`GET /v1/runs/{id}/events`) or its stream "
        "(`GET /v1/runs/{id}/stream`) carries has a `seq`, a `type` and the fields below.",
        "",
        "| type | stored | what it says |",
        "|---|---|---|",
    ]
    for etype, what in CATALOGUE.items():
        stored = "no (live only)" if etype in LIVE_ONLY else "yes"
        lines.append(f"| `{etype.value}` | {stored} | {what} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    import sys

    print(render_js() if sys.argv[1:] == ["js"] else render_markdown(), end="")
