"""The SSE frame format the API writes and the client's parser for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

from treadle.api.sse import sse_frame
from treadle.client.http import SseEvent, parse_sse


async def lines_of(*chunks: bytes | str) -> AsyncIterator[str]:
    text = "".join(c.decode() if isinstance(c, bytes) else c for c in chunks)
    for line in text.split("\n"):
        yield line


async def parse(*chunks: bytes | str) -> list[SseEvent]:
    return [ev async for ev in parse_sse(lines_of(*chunks))]


def test_frame_with_id() -> None:
    assert sse_frame("text", {"seq": 3, "text": "hi"}, 3) == b'id: 3\nevent: text\ndata: {"seq":3,"text":"hi"}\n\n'


def test_frame_without_id() -> None:
    assert sse_frame("done", {}) == b"event: done\ndata: {}\n\n"


def test_frame_is_one_data_line_even_for_multiline_text() -> None:
    frame = sse_frame("text", {"text": "a\nb\n\nc"}, 1)
    assert frame.count(b"\n\n") == 1 and frame.endswith(b"\n\n")
    assert frame.decode().splitlines()[2] == 'data: {"text":"a\\nb\\n\\nc"}'


def test_frame_serialises_non_json_values() -> None:
    ts = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert b'"ts":"2024-01-02 03:04:05+00:00"' in sse_frame("x", {"ts": ts}, 1)


async def test_round_trip() -> None:
    frames = [sse_frame("user_input", {"seq": 1}, 1), b": keepalive\n\n", sse_frame("done", {"seq": 2, "x": "y"}, 2)]
    events = await parse(*frames)
    assert events == [SseEvent("user_input", {"seq": 1}, 1), SseEvent("done", {"seq": 2, "x": "y"}, 2)]


async def test_parse_defaults_and_comments() -> None:
    events = await parse(': hello\n', 'data: {"a":1}\n\n', "id: 7\n: ignored\nevent: e\ndata: {}\n\n")
    assert events == [SseEvent("message", {"a": 1}, None), SseEvent("e", {}, 7)]


async def test_parse_joins_multiline_data_and_accepts_no_space() -> None:
    events = await parse('event:x\ndata:{"a":\ndata: 1}\nid:12\n\n')
    assert events == [SseEvent("x", {"a": 1}, 12)]


async def test_parse_ignores_non_numeric_ids_and_frames_without_data() -> None:
    events = await parse("id: abc\nevent: e\ndata: {}\n\n", "event: lonely\n\n", "retry: 100\n\n")
    assert events == [SseEvent("e", {}, None)]
    # "²".isdigit() is True, but it is not a seq
    assert await parse("id: \u00b2\nevent: e\ndata: {}\n\n") == [SseEvent("e", {}, None)]


async def test_parse_resets_between_frames() -> None:
    events = await parse("id: 1\nevent: a\ndata: {}\n\n", "data: {}\n\n")
    assert events == [SseEvent("a", {}, 1), SseEvent("message", {}, None)]


async def test_parse_yields_a_trailing_frame_without_blank_line() -> None:
    async def lines() -> AsyncIterator[str]:
        for line in ["id: 4", "event: done", 'data: {"ok":true}']:
            yield line

    assert [ev async for ev in parse_sse(lines())] == [SseEvent("done", {"ok": True}, 4)]
