"""The event catalogue (domain/events.py) is the one place event types are named: readers and
emitters use `EventType` (SQL too), the web page `EVENTS` from the generated events.js, docs/events.md
is generated from it, and typed events round-trip. tests/support/eventnames.py finds the rest."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.support import eventnames
from treadle.domain import events
from treadle.domain.events import EventType

ROOT = Path(__file__).resolve().parents[2]
#: sites that name something else with an event type's word: (path, the text on the line)
NOT_EVENTS = {
    ("core/treadle/api/openai_compat/responses_wire.py", 'all(p["type"] == "text" for p in parts)'),  # OpenAI's parts
}


def test_no_event_type_is_named_as_a_string_outside_the_catalogue() -> None:
    found = [s for s in eventnames.scan(ROOT)
             if not any(s.startswith(path + ":") and text in s for path, text in NOT_EVENTS)]
    assert not found, "name event types by EventType (Python, SQL) or EVENTS (the page):\n" + "\n".join(found)


#: each form a site was found in (the old line), and the form the finder names it by
FORMS = [
    ('ended = events[-1].type in ("done", "error")', "compared"),
    ('streamed = etype != "text"', "compared"),
    ('x = [e for e in events if e["type"] == "tool_call"]', "compared"),
    ('ok = frame.get("event") not in ("text_delta", "thinking_delta")', "compared"),
    ('seen = {p for _, t, p in events if t == "limit"}', "compared"),
    ('match ev.type:\n    case "done":\n        pass', "matched"),
    ('TERMINAL_EVENTS = frozenset({"done", "error"})', "collected"),
    ('SHOW = {"text": show_text, "tool_call": show_call}', "collected"),
    ('e = NewEvent("tool_result", {"text": t}, tool_use_id=i)', "emitted"),
    ('f = sse_frame("session", {"session_id": s})', "emitted"),
    ('result.events.append(("channel_publish", {"channel": info}))', "emitted"),
    ('park.events.append(("interruption_pending", row.pending_event()))', "emitted"),
    ('result.events.append(("channel_delivery", {"channel": info}))', "emitted"),  # not in the catalogue then
    ('e = NewEvent("reasoning_invalidated", {"text": t})', "emitted"),  # nor this
    ('def steer(data):\n    return "steer", {**data}', "emitted"),
    ('hub.publish(run_id, f"{kind}_delta", {"text": delta})', "made"),
    ('q = "SELECT 1 FROM events WHERE run_id = %s AND type = \'tool_result\'"', "in SQL"),
    ('q = "SELECT seq FROM events WHERE type IN (\'user_input\', \'turn_cancelled\')"', "in SQL"),
    ('q = "INSERT INTO events (seq, type, payload) VALUES (1, \'user_input\', %(ui)s::jsonb)"', "in SQL"),
]
JS_FORMS = [
    'if (type === "tool_call") text = 1;',
    'if (ev.event === "agent" || ev.event === "session") continue;',
    '  case "done": return 1;',
    'if (["done", "error", "tool_parked"].includes(ev.event)) load();',
    'if (type === EVENTS.TOOL_CAL) load();',
]


@pytest.mark.parametrize(("line", "form"), FORMS)
def test_the_finder_knows_each_form(line: str, form: str) -> None:
    """Each line is (the shape of) one that was in the code: the scan above must see it."""
    assert form in {f for _n, f in eventnames.python_sites(line)}


@pytest.mark.parametrize("line", JS_FORMS)
def test_the_finder_knows_each_form_in_the_page(line: str) -> None:
    assert eventnames.js_sites(line)


def test_the_finder_lets_other_words_be() -> None:
    assert eventnames.python_sites('ok = scope == "agent" and fmt in ("text", "json")\nx = {"text": t, "k": 1}') == []
    assert eventnames.python_sites('q = "SELECT payload->>\'text\' FROM memory WHERE scope = \'agent\'"') == []
    assert eventnames.js_sites('if (k === "text") node.textContent = v; switch (type) { case EVENTS.DONE: }') == []


def test_the_page_reads_the_catalogue() -> None:
    """events.js is generated from the catalogue, and the page loads it before the script that uses it."""
    watch = ROOT / "core" / "treadle" / "api" / "watch"
    assert (watch / "events.js").read_text() == events.render_js(), (
        "events.js is stale: python -m treadle.domain.events js > core/treadle/api/watch/events.js")
    page = (watch / "index.html").read_text()
    assert 0 <= page.index('src="/ui/events.js"') < page.index('src="/ui/watch.js"')


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
