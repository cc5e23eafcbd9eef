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

from collections.abc import Callable
from collections.abc import Set as AbstractSet
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
from treadle.domain.events import ContextCompaction, EventType
from treadle.domain.segments import split_segments, user_images
from treadle.engine import compaction

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
    #: facts a step would otherwise scan the whole transcript for in Python, kept as events are
    #: fed: every tool_use id the transcript holds, whether any assistant turn holds reasoning,
    #: and the highest steering-queue id consumed (engine/waiting.py `consumed_input_id`)
    tool_ids: AbstractSet[str] = field(default_factory=frozenset)
    has_thinking: bool = False
    consumed_input_id: int = 0
    #: compaction facts (engine/compaction.py): the last model call's context footprint (input +
    #: cache tokens) and window, the iteration the last compaction preceded, the one the last
    #: compaction attempt (done or failed) preceded, and the iteration of the last `Context
    #: op=compact` call (a self-compaction request, for the next iteration only)
    context_used: int = 0
    context_window: int = 0
    compacted_at: int = -2
    compaction_tried_at: int = -2
    self_compact_at: int = -1


class Replayer:
    """The replay as a state that events are fed to, in seq order: a worker that chains steps feeds
    each step only the events its last commit added (`feed`), instead of replaying the whole
    transcript again; `transcript()` renders the state without changing it."""

    __slots__ = (
        "_assistant",
        "_assistant_iter",
        "_closed",
        "_compaction",
        "_finished",
        "_input_id",
        "_iterations",
        "_parked",
        "_results",
        "_scrubbed",
        "_system",
        "_thinking",
        "_tool_ids",
        "_tool_ids_frozen",
        "_usage",
        "fed",
        "last_seq",
    )

    def __init__(self, history: list[Message] | None = None) -> None:
        #: messages no later event can change; a session's continuation starts from the messages of
        #: the session's earlier runs (`history`, rendered by `history_messages`)
        self._closed: list[Message] = list(history or [])
        self._system: list[str] = []
        self._assistant: Message | None = None  # the assistant turn being assembled
        self._assistant_iter: object = None
        self._results: dict[str, ToolResultBlock] = {}  # answers to `_assistant`'s tool_uses
        self._iterations = 0
        self._usage = dict.fromkeys(USAGE_KEYS, 0)
        self._finished = False
        self._parked: dict[str, dict[str, Any]] = {}
        self._tool_ids: set[str] = set()
        self._tool_ids_frozen: frozenset[str] | None = frozenset()  # None: to copy again
        self._thinking = False
        self._input_id = 0
        #: [context_used, context_window, compacted_at, compaction_tried_at, self_compact_at]
        self._compaction = [0, 0, -2, -2, -1]
        #: how many events were fed, and the seq of the last one
        self.fed = 0
        self.last_seq = 0
        #: (the scrub's key, the scrubbed form of each closed message): see `scrubbed`
        self._scrubbed: tuple[object, list[Message]] = (None, [])

    def _close_turn(self) -> None:
        """A later event closed the assistant turn: its unanswered tool_uses get the orphan answer."""
        if self._assistant is not None:
            self._closed.extend(self._render_turn(final=False)[0])
            self._assistant, self._assistant_iter, self._results = None, None, {}

    def _render_turn(self, final: bool) -> tuple[list[Message], list[ToolUseBlock]]:
        assistant = self._assistant
        if assistant is None:
            return [], []
        answered: list[Block] = []
        missing: list[ToolUseBlock] = []
        for tu in assistant.tool_uses():
            r = self._results.get(tu.id)
            if r is not None:
                answered.append(r)
            else:
                missing.append(tu)
        pending: list[ToolUseBlock] = []
        if missing and final:
            pending = missing
        else:
            answered.extend(ToolResultBlock(tu.id, ORPHAN_RESULT_TEXT, True) for tu in missing)
        # a copy: the open turn may still grow while this rendering is in use
        out = [Message("assistant", list(assistant.content)) if final else assistant]
        if answered:
            out.append(Message("user", answered))
        return out, pending

    def feed(self, events: list[tuple[int, str, dict[str, Any]]]) -> Replayer:
        for seq, etype, payload in events:
            self._one(etype, payload)
            self.last_seq = seq
        self.fed += len(events)
        return self

    def _one(self, etype: str, payload: dict[str, Any]) -> None:
        self._input_id = max(self._input_id, input_id_of(etype, payload))
        if etype == EventType.USER_INPUT:
            self._close_turn()
            segs = payload.get("segments") or []
            sys_text, user_text = split_segments(segs if isinstance(segs, list) else [])
            if sys_text:
                self._system.append(sys_text)
            images: list[Block] = [ImageBlock(mt, data) for mt, data in
                                   user_images(segs if isinstance(segs, list) else [])]
            if user_text or images:
                self._closed.append(Message("user", [*([TextBlock(user_text)] if user_text else []), *images]))
        elif etype in (EventType.TEXT, EventType.THINKING, EventType.TOOL_CALL):
            iteration = payload.get("iteration")
            if self._assistant is None or self._results or iteration != self._assistant_iter:
                self._close_turn()
                self._assistant, self._assistant_iter = Message("assistant"), iteration
            assistant = self._assistant
            if etype == EventType.TEXT:
                assistant.content.append(TextBlock(str(payload.get("text", ""))))
            elif etype == EventType.THINKING:
                self._thinking = True
                assistant.content.append(
                    ThinkingBlock(
                        str(payload.get("text", "")), payload.get("signature"), source=payload.get("source")
                    )
                )
            else:
                tu = payload.get("tool_use") or {}
                block = ToolUseBlock(str(tu.get("id")), str(tu.get("name")), dict(tu.get("input") or {}))
                assistant.content.append(block)
                if block.name == "Context" and block.input.get("op") == "compact":
                    self._compaction[4] = int(payload.get("iteration") or 0)
                self._tool_ids.add(block.id)
                self._tool_ids_frozen = None
        elif etype == EventType.TOOL_RESULT:
            tu = payload.get("tool_use") or {}
            tid = str(tu.get("id"))
            if self._assistant is not None and any(u.id == tid for u in self._assistant.tool_uses()):
                self._results[tid] = ToolResultBlock(tid, str(payload.get("text", "")), bool(payload.get("is_error")))
        elif etype == EventType.USAGE:
            self._iterations += 1
            usage = payload.get("usage") or {}
            for k in self._usage:
                v = usage.get(k)
                if isinstance(v, int):
                    self._usage[k] += v
            self._compaction[0] = sum(v for k in ("input_tokens", "cache_read_input_tokens",
                                                  "cache_creation_input_tokens")
                                      if isinstance(v := usage.get(k), int))
            window = usage.get("max_context_tokens")
            self._compaction[1] = window if isinstance(window, int) else 0
        elif etype == EventType.CONTEXT_COMPACTION:
            self._close_turn()
            cc = ContextCompaction.parse(payload)
            self._closed = compaction.apply(self._closed, cc.summary, cc.keep_n, cc.keep_first)
            self._scrubbed = (None, [])  # the closed messages changed: scrub them again
            self._compaction[2] = self._compaction[3] = cc.iteration
        elif etype == EventType.COMPACTION_FAILED:
            self._compaction[3] = int(payload.get("iteration") or 0)
        elif etype == EventType.TOOL_PARKED:
            tu = payload.get("tool_use") or {}
            wait = payload.get("wait")
            if isinstance(wait, dict):
                self._parked.setdefault(str(tu.get("id")), wait)
        elif etype in (EventType.DONE, EventType.ERROR):
            self._finished = True

    def transcript(self) -> Transcript:
        """The transcript of the events fed so far (a new object; the caller may change it)."""
        tail, pending = self._render_turn(final=True)
        return Transcript(
            system_extra="\n\n".join(self._system),
            messages=[*self._closed, *tail],
            pending=pending,
            iterations=self._iterations,
            usage=dict(self._usage),
            finished=self._finished,
            parked=dict(self._parked),
            tool_ids=self._frozen_tool_ids(),
            has_thinking=self._thinking,
            consumed_input_id=self._input_id,
            context_used=self._compaction[0],
            context_window=self._compaction[1],
            compacted_at=self._compaction[2],
            compaction_tried_at=self._compaction[3],
            self_compact_at=self._compaction[4],
        )

    def _frozen_tool_ids(self) -> frozenset[str]:
        """The tool ids as a frozen copy a rendered transcript keeps (later events do not change
        it), copied again only after a tool_use was fed."""
        if self._tool_ids_frozen is None:
            self._tool_ids_frozen = frozenset(self._tool_ids)
        return self._tool_ids_frozen

    def scrubbed(self, transcript: Transcript, key: object, scrub: Callable[[list[Message]], list[Message]]) -> (
            list[Message]):
        """`scrub(transcript.messages)` for a transcript this replayer rendered, reusing the scrubbed
        form of the closed messages from earlier calls while `key` (the scrub's configuration)
        is the same: each step scrubs only what is new."""
        closed = len(self._closed)
        if len(transcript.messages) < closed or any(
                a is not b for a, b in zip(transcript.messages, self._closed, strict=False)):
            return scrub(transcript.messages)  # not this replayer's rendering (a caller rebuilt it)
        cached_key, done = self._scrubbed
        if cached_key != key:
            done = []
        if len(done) < closed:
            done = [*done, *scrub(self._closed[len(done):closed])]
        self._scrubbed = (key, done)
        return [*done, *scrub(transcript.messages[closed:])]


    def closed_messages(self) -> list[Message]:
        """Every turn closed as a later run sees it: an unanswered tool_use of the last turn gets
        the orphan answer (invariant 2), nothing is pending."""
        self._close_turn()
        return list(self._closed)


def history_messages(events: list[tuple[int, str, dict[str, Any]]]) -> list[Message]:
    """The conversation of a session's earlier runs (their events in order), as the messages a
    continuing run starts from: user turns, assistant turns and their results; the earlier runs'
    system segments, usage and endings are not carried over."""
    return Replayer().feed(events).closed_messages()


def input_id_of(etype: str, payload: dict[str, Any]) -> int:
    """The steering-queue id an event consumed (a steered `user_input`, a `turn_cancelled`, a manual
    compaction's `context_compaction` / `compaction_failed`), or 0."""
    if etype in (EventType.USER_INPUT, EventType.TURN_CANCELLED, EventType.CONTEXT_COMPACTION,
                 EventType.COMPACTION_FAILED):
        input_id = payload.get("input_id")
        if isinstance(input_id, int):
            return input_id
    return 0


USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def replay(events: list[tuple[int, str, dict[str, Any]]]) -> Transcript:
    return Replayer().feed(events).transcript()
