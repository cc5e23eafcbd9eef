"""How POST /v1/runs chooses its answer from `Accept` (api/runstream.py): the run's SSE stream
unless JSON is preferred (loomcycle's default); where JSON is the default (the cloud's api
function), the stream only when `text/event-stream` is named at a q no lower than JSON's."""

from __future__ import annotations

import pytest

from treadle.api.runstream import answers_with_stream, quality

LOOMCYCLE_CLIENT = "text/event-stream, application/json"  # what its TS client sends (adapters/ts)


@pytest.mark.parametrize(("accept", "streams", "streams_where_json_is_default"), [
    (None, True, False),
    ("", True, False),
    ("*/*", True, False),  # httpx, curl, fetch
    ("text/event-stream", True, True),
    (LOOMCYCLE_CLIENT, True, True),
    ("application/json", False, False),
    ("Application/JSON; charset=utf-8", False, False),
    ("application/json, */*;q=0.8", False, False),
    ("application/json, text/plain, */*", True, False),  # axios: a tie, so the default
    ("text/*", True, False),  # where JSON is the default, the stream is named, not matched by a wildcard
    ("text/event-stream;q=0.5, application/json", False, False),
    ("text/event-stream, application/json;q=0.9", True, True),
    ("text/event-stream;q=0, */*", False, False),  # the stream refused
    ("text/html", True, False),  # neither acceptable: the default (no 406)
    ("application/json;q=nonsense", False, False),  # a q that is no number counts as 1
    (",,;q=1, garbage", True, False),
])
def test_accept_chooses_the_answer(accept: str | None, streams: bool, streams_where_json_is_default: bool) -> None:
    assert answers_with_stream(accept, stream_by_default=True) is streams
    assert answers_with_stream(accept, stream_by_default=False) is streams_where_json_is_default


def test_the_most_specific_range_gives_the_quality() -> None:
    assert quality("*/*;q=0.1, text/*;q=0.5, text/event-stream;q=0.9", "text/event-stream") == (0.9, 2)
    assert quality("*/*;q=0.1, text/*;q=0.5", "text/event-stream") == (0.5, 1)
    assert quality("*/*;q=0.1", "application/json") == (0.1, 0)
    assert quality("text/html", "application/json") == (0.0, -1)
