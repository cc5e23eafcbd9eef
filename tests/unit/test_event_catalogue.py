"""The event catalogue (domain/events.py) is the one place event types are named: readers compare
against `EventType`, docs/events.md is generated from it, and typed events round-trip."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from treadle.domain import events
from treadle.domain.events import EventType

ROOT = Path(__file__).resolve().parents[2]
#: an event type read off an event (`etype`, `<x>.type`, a transcript tuple's `[1]`) compared
#: with a string literal; vendor wire formats (providers/) compare their own block types
COMPARED = re.compile(r'(?:\betype|\b[a-z_]+\.(?:type|event)|\[1\])\s*(?:==|!=|not in|in)\s*'
                      r'(\("[a-z_]+"(?:,\s*"[a-z_]+")*\)|"[a-z_]+")')


def test_no_event_type_is_compared_as_a_string_outside_the_catalogue() -> None:
    names = {e.value for e in EventType}
    found = []
    for path in [*(ROOT / "core").rglob("*.py"), *(ROOT / "sidecar").rglob("*.py"), *(ROOT / "cloud").rglob("*.py")]:
        if (path.name == "events.py" and path.parent.name == "domain") or "providers" in path.parts:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in COMPARED.finditer(line):
                if set(re.findall(r'"([a-z_]+)"', m.group(1))) & names:
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "compare with EventType members instead:\n" + "\n".join(found)


def test_a_typed_event_stores_every_field() -> None:
    """`to_payload` reads a class's `__match_args__`: a field left out of it (kw_only, init=False)
    would be dropped from the stored payload without this check."""
    typed = [c for c in vars(events).values()
             if isinstance(c, type) and issubclass(c, events._Typed) and c is not events._Typed]
    assert typed
    for cls in typed:
        assert cls.__match_args__ == tuple(f.name for f in dataclasses.fields(cls)), cls


def test_docs_events_md_is_generated_from_the_catalogue() -> None:
    assert (ROOT / "docs" / "events.md").read_text() == events.render_markdown(), (
        "docs/events.md is stale: python -m treadle.domain.events > docs/events.md")


def test_every_type_is_described() -> None:
    assert set(events.CATALOGUE) == set(EventType)


@pytest.mark.parametrize("typed", [
    events.Text("hi", 2),
    events.Thinking("hmm", None, 1),
    events.Thinking("hmm", "sig", 1, "openai"),
    events.ToolCall(events.ToolUseRef("t1", "Memory", {"op": "get"}), 3),
    events.Usage({"input_tokens": 3, "model": "m"}, 1),
    events.ToolResult(events.ToolUseRef("t1", "Memory", {}), "ok", False),
    events.ToolParked(events.ToolUseRef("t1", "Channel", {}), {"kind": "channel", "deadline": None}, 2),
    events.AwaitingInput(4),
    events.TurnCancelled("stop", 2, 9),
    events.UserInput.steer("more", 5),
    events.LimitCrossed({"scope": "tenant", "scope_id": "", "severity": "soft", "used": 9, "limit": 8}, 2),
    events.Done("end_turn", {"input_tokens": 1}),
    events.Done("cancelled", {}, reason="by api"),
    events.Error("run_timeout", "run timeout exceeded", {"status": 504}),
])
def test_typed_events_round_trip(typed: events.TypedEvent) -> None:
    event = typed.event()
    assert event.type == typed.type and event.type in set(EventType)
    assert events.parse(event.type, event.payload) == typed
    if isinstance(typed, events.ToolResult):
        assert event.tool_use_id == "t1"


def test_an_event_without_a_class_parses_to_none() -> None:
    assert events.parse("channel_publish", {"channel": {}}) is None
