"""One contract suite, two shapes (issue 43 item 1): each scenario is written once against the
Python client and runs against the sidecar and the local cloud (tests/support/shapes.py). A
scenario that passes on one shape and fails on the other is a divergence of the shapes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.support.shapes import LOOKUP, WEBHOOK_SECRET, Shape
from tests.support.signing import github_headers
from treadle.client import ApiError, SseEvent, Treadle
from treadle.client.models import TERMINAL, Run


def until(c: Treadle, run_id: str, ok: Callable[[Run], bool], what: str, timeout_s: float = 40.0) -> Run:
    deadline = time.monotonic() + timeout_s
    while True:
        run = c.runs.get(run_id)
        if ok(run):
            return run
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: run {run_id} is {run.status} after {timeout_s} s")
        time.sleep(0.05)


def ended(c: Treadle, run_id: str) -> Run:
    return until(c, run_id, lambda r: r.status in TERMINAL, "ended")


def parked(c: Treadle, run_id: str) -> Run:
    return until(c, run_id, lambda r: r.status == "waiting", "parked")


def texts(c: Treadle, run_id: str) -> list[str]:
    return [str((e.model_extra or {})["text"]) for e in c.runs.events(run_id).events if e.type == "text"]


def seqs(events: list[SseEvent]) -> list[int]:
    return [e.id for e in events if e.id is not None]


def test_run_and_stream(shape: Shape) -> None:
    c = shape.client
    frames = list(c.runs.start_streaming("calc", "add things", user_id="u1"))
    assert [f.event for f in frames[:2]] == ["session", "agent"]
    assert frames[-1].event == "done", [f.event for f in frames]
    run_id = frames[1].data["run_id"]
    run = c.runs.get(run_id)
    assert run.status == "completed" and run.iterations == 4, run
    assert seqs(frames) == list(range(1, run.last_seq + 1))  # every event once, in order
    assert [e.type for e in c.runs.events(run_id).events] == [f.event for f in frames if f.id is not None]


def test_a_cut_stream_resumes_without_gap_or_repeat(shape: Shape) -> None:
    c = shape.client
    started = c.runs.start("calc", "add things")
    ended(c, started.run_id)
    shape.cutter.arm(frames=4)  # the agent frame and three events, then the connection is lost
    frames = list(c.runs.stream(started.run_id))
    assert shape.cutter.cuts == 1
    run = c.runs.get(started.run_id)
    assert seqs(frames) == list(range(1, run.last_seq + 1)) and frames[-1].event == "done"


def test_cancel(shape: Shape) -> None:
    c = shape.client
    started = c.runs.start("slow", "count slowly")
    until(c, started.run_id, lambda r: r.iterations >= 1 or r.status == "running", "started")
    answer = c.runs.cancel(started.run_id, reason="enough")
    assert answer.cancel_requested, answer
    run = ended(c, started.run_id)
    assert run.status == "cancelled" and run.iterations < 50, run


def test_park_and_wake_on_a_channel(shape: Shape) -> None:
    c = shape.client
    started = c.runs.start("listener", "wait for news")
    run = parked(c, started.run_id)
    assert run.status == "waiting"
    c.channels.publish("news", {"headline": "it happened"})
    assert ended(c, started.run_id).status == "completed"
    assert texts(c, started.run_id) == ["heard it"]
    [result] = [e for e in c.runs.events(started.run_id).events if e.type == "tool_result"]
    assert "it happened" in str(result.model_extra)


def test_an_interruption_answered(shape: Shape) -> None:
    c = shape.client
    started = c.runs.start("asker", "ask me", user_id="u-ask")
    parked(c, started.run_id)
    [question] = c.runs.interrupts(started.run_id, status="pending").interrupts
    assert question.question == "proceed?" and question.options == ["yes", "no"]
    assert c.runs.answer(started.run_id, question.interrupt_id, "yes").status == "resolved"
    assert ended(c, started.run_id).status == "completed"
    assert texts(c, started.run_id) == ["asked"]
    assert c.runs.interrupts(started.run_id, status="pending").interrupts == []


def test_an_application_tool(shape: Shape) -> None:
    c = shape.client
    started = c.runs.start("shopper", "where is my order?", client_tools=[LOOKUP])
    parked(c, started.run_id)
    [pending] = [e.model_extra or {} for e in c.runs.events(started.run_id).events if e.type == "tool_pending"]
    call: dict[str, Any] = pending["tool_use"]
    assert call["name"] == "lookup_order" and call["input"] == {"order_id": "A-17"}
    assert c.runs.tool_result(started.run_id, call["id"], '{"status": "shipped"}').woke == 1
    assert ended(c, started.run_id).status == "completed"
    assert texts(c, started.run_id) == ["found it"]


def test_a_schedule_fired(shape: Shape) -> None:
    c = shape.client
    run_id = shape.fire_schedule("minutely")
    run = ended(c, run_id)
    assert run.status == "completed" and run.agent == "echo"
    assert texts(c, run_id) == ["scheduled hello"]
    assert shape.fire_schedule("minutely") == run_id  # the same minute again: the same fire, no second run
    recent = c.schedules.state("minutely").recent_fires
    assert [f.get("run_id") for f in recent].count(run_id) == 1, recent


def test_a_signed_webhook(shape: Shape) -> None:
    c = shape.client
    payload = {"issue": {"title": "red build " + uuid.uuid4().hex[:6]}}
    body = httpx.Request("POST", "http://x", json=payload).content  # the bytes the client sends
    headers = github_headers(WEBHOOK_SECRET, body)
    accepted = c.webhooks.deliver("github", payload, headers=headers)
    assert accepted.run_id and not accepted.duplicate
    again = c.webhooks.deliver("github", payload, headers=headers)
    assert again.run_id == accepted.run_id and again.duplicate  # the same delivery id: no second run
    forged = {**headers, "X-Hub-Signature-256": "sha256=" + "f" * 64, "X-GitHub-Delivery": str(uuid.uuid4())}
    with pytest.raises(ApiError) as refused:
        c.webhooks.deliver("github", payload, headers=forged)
    assert (refused.value.status, refused.value.code) == (401, "invalid_signature")
    assert ended(c, accepted.run_id).status == "completed"
    assert payload["issue"]["title"] in texts(c, accepted.run_id)[-1]


def test_a_sub_agent(shape: Shape) -> None:
    c = shape.client
    started = c.runs.start("boss", "delegate")
    run = ended(c, started.run_id)
    assert run.status == "completed" and texts(c, started.run_id) == ["the child answered"]
    children = [r for r in c.runs.list(limit=100).runs if r.parent_run_id == started.run_id]
    assert [(r.agent, r.status) for r in children] == [("echo", "completed")]
    assert texts(c, children[0].run_id) == ["ping"]
