"""The stream function as the Lambda Web Adapter runs it: `python -m treadle_cloud.stream` (the
command functions/stream/run.sh execs) as a real process serving HTTP on loopback, read by a real
HTTP client while the worker commits a run's steps one by one; and a background OpenAI response's
events read through it by the official SDK."""

from __future__ import annotations

import json
import queue as queues
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import psycopg
import pytest

from tests.support.lambda_sim import EventSourceMapping, LambdaEnv, http_event
from tests.support.localcloud import API_TOKEN
from tests.support.streamfn import stream_server

AUTH = {"authorization": f"Bearer {API_TOKEN}"}


@pytest.fixture
def stream_url(cloud_env: dict[str, str]) -> Iterator[str]:
    with stream_server(cloud_env) as url:
        yield url


def read_frames(url: str, run_id: str, out: queues.Queue[tuple[float, dict[str, Any]]]) -> None:
    """Parse the SSE response as it arrives; each frame with the moment it was read."""
    with httpx.stream("GET", f"{url}/v1/runs/{run_id}/stream", headers={**AUTH, "accept": "text/event-stream"},
                      timeout=httpx.Timeout(60.0)) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        for line in resp.iter_lines():
            if line == "":
                if "event" in fields and "id" in fields:  # stored events (not loomcycle's `agent` preamble)
                    out.put((time.monotonic(), {"id": fields.get("id"), "event": fields["event"],
                                                "data": json.loads(fields["data"])}))
                fields = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                fields[key] = value
    out.put((time.monotonic(), {"event": "<end>"}))


def last_seq(db: str, run_id: str) -> int:
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT last_seq FROM runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None
    return int(row[0])


def test_events_reach_a_streaming_client_as_each_step_commits(
    stream_url: str, sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    # the API's auth: no token, no stream
    assert httpx.get(f"{stream_url}/v1/runs/r_x/stream").status_code == 401
    api, worker = LambdaEnv("api"), LambdaEnv("worker")
    try:
        resp = api.invoke(http_event("POST", "/v1/runs", headers=AUTH, body={"agent": "calc", "prompt": "hi"}))
        run_id = json.loads(resp["body"])["run_id"]
        frames: queues.Queue[tuple[float, dict[str, Any]]] = queues.Queue()
        opened = time.monotonic()
        reader = threading.Thread(target=read_frames, args=(stream_url, run_id, frames), daemon=True)
        reader.start()
        t_first, first = frames.get(timeout=30)
        assert first["event"] == "user_input"
        seen = [first]
        lags: list[float] = []
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker], batch_size=1)
        for _ in range(4):  # calc: 3 tool calls, 4 steps, one message each
            assert esm.poll_once(wait_s=1) == 1
            committed_at, target = time.monotonic(), last_seq(cloud_db, run_id)
            # every event this step committed reaches the client before the next step runs
            while int(seen[-1].get("id") or 0) < target:
                t, frame = frames.get(timeout=30)
                assert frame["event"] != "<end>", seen
                seen.append(frame)
            lags.append(t - committed_at)
        assert seen[-1]["event"] == "done"
        assert frames.get(timeout=30)[1]["event"] == "<end>"  # the response ends with the run
        assert [int(f["id"]) for f in seen] == list(range(1, len(seen) + 1))
        print(f"\nstream function: first event {1000 * (t_first - opened):.0f} ms after the request;"
              f" a step's last event read {', '.join(f'{1000 * lag:.0f}' for lag in lags)} ms after the"
              " worker's invocation returned (negative: before)")
    finally:
        api.close()
        worker.close()


def test_a_background_response_streams_through_the_stream_function(
    stream_url: str, sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    """The official SDK reads a background response's events from the stream function (not
    buffered, unlike the API function) while SQS-driven worker invocations step its run: the first
    events arrive before any step, the last after the run's end, all numbered once, as a replay."""
    api, worker = LambdaEnv("api"), LambdaEnv("worker")
    try:
        resp = api.invoke(http_event("POST", "/v1/responses", headers=AUTH,
                                     body={"model": "calc", "input": "count", "background": True}))
        created = json.loads(resp["body"])
        assert created["status"] == "queued", created
        events: queues.Queue[Any] = queues.Queue()

        def read() -> None:
            with openai.OpenAI(base_url=stream_url + "/v1", api_key=API_TOKEN, max_retries=0, timeout=60) as c:
                for event in c.responses.retrieve(created["id"], stream=True):
                    events.put(event)
            events.put(None)

        threading.Thread(target=read, daemon=True).start()
        seen = [events.get(timeout=30), events.get(timeout=30)]  # before any worker invocation
        assert [e.type for e in seen] == ["response.created", "response.in_progress"]
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker], batch_size=1)
        for _ in range(4):  # calc: 3 tool calls, 4 steps
            assert esm.poll_once(wait_s=1) == 1
        while (event := events.get(timeout=30)) is not None:
            seen.append(event)
        assert seen[-1].type == "response.completed" and seen[-1].response.output_text
        assert [e.sequence_number for e in seen] == list(range(len(seen)))
        with openai.OpenAI(base_url=stream_url + "/v1", api_key=API_TOKEN, max_retries=0) as c:
            again = list(c.responses.retrieve(created["id"], stream=True, starting_after=1))
        assert [e.model_dump() for e in again] == [e.model_dump() for e in seen[2:]]
    finally:
        api.close()
        worker.close()
