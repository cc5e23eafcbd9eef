"""The HTTP API served by a real uvicorn server (the sidecar app, in-process, on a loopback
ephemeral port) over the shared test database, exercised with httpx."""

from __future__ import annotations

import asyncio
import secrets
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from treadle.client.http import SseEvent, parse_sse
from treadle.config import Settings, TreadleConfig, parse_config
from treadle.store.db import open_pool
from treadle.store.runs import NewRun, RunStore
from treadle.testing import ACCEPT_JSON, user_text
from treadle.testing import until as wait_for

MAX_BODY = 4096
TOKEN = "s3cret-" + secrets.token_hex(8)

CONFIG: TreadleConfig = parse_config(
    {
        "agents": {
            "echo": {"model": "echo"},
            "tools": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 2}},
            "slow": {"model": "echo", "mock": {"latency_ms": 400}},
            "forever": {
                "model": "tool-caller",
                "tools": ["Context"],
                "max_iterations": 10000,
                "mock": {"tool_calls": 10000, "latency_ms": 30},
            },
        }
    }
)


def settings(db_url: str, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": db_url,
        "home": TEST_HOME,
        "config": Path("unused-treadle.yaml"),
        "workers": 2,
        "auth_token": None,
        "max_request_bytes": MAX_BODY,
        "sweep_interval_seconds": 30.0,
        "sse_keepalive_seconds": 30.0,
    }
    return Settings(**{**base, **overrides})


class Api:
    def __init__(self, client: httpx.AsyncClient, server: BackgroundServer) -> None:
        self.client = client
        self.server = server
        self.started: list[str] = []

    async def start(self, agent: str = "echo", prompt: str | None = "hello", **body: Any) -> str:
        payload = {"agent": agent, **({"prompt": prompt} if prompt is not None else {}), **body}
        resp = await self.client.post("/v1/runs", json=payload)
        assert resp.status_code == 202, resp.text
        run_id: str = resp.json()["run_id"]
        self.started.append(run_id)
        return run_id

    async def run(self, run_id: str) -> dict[str, Any]:
        resp = await self.client.get(f"/v1/runs/{run_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()  # type: ignore[no-any-return]

    async def wait(self, run_id: str, until: Callable[[dict[str, Any]], bool] | None = None,
                   timeout: float = 20.0) -> dict[str, Any]:
        done = until or (lambda r: r["status"] in ("completed", "failed", "cancelled"))

        async def settled() -> dict[str, Any] | None:
            run = await self.run(run_id)
            return run if done(run) else None

        found: dict[str, Any] = await wait_for(settled, timeout, interval=0.02, what=f"run {run_id}")
        return found

    async def events(self, run_id: str, from_seq: int = 0) -> list[dict[str, Any]]:
        resp = await self.client.get(f"/v1/runs/{run_id}/events", params={"from_seq": from_seq})
        assert resp.status_code == 200, resp.text
        return resp.json()["events"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
async def api(db_url: str) -> AsyncIterator[Api]:
    server = BackgroundServer(settings(db_url), CONFIG)
    base = await server.start()
    assert base.startswith("http://127.0.0.1:")
    client = httpx.AsyncClient(headers=ACCEPT_JSON, base_url=base, timeout=20.0)
    a = Api(client, server)
    try:
        yield a
    finally:
        # leave nothing running in the shared database for later tests' workers
        try:
            active = {
                r["run_id"]
                for status in ("queued", "running")
                for r in (await client.get("/v1/runs", params={"status": status, "limit": 500})).json()["runs"]
            }
            for run_id in active & set(a.started):
                await client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "test teardown", "scope": "run"})
                await a.wait(run_id)
        finally:
            await client.aclose()
            await server.stop()


def assert_error(resp: httpx.Response, status: int, code: str, contains: str = "") -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert body["code"] == code, body
    assert isinstance(body["error"], str) and body["error"]
    assert contains in body["error"], body
    return body  # type: ignore[no-any-return]


async def sse_lines(resp: httpx.Response) -> list[str]:
    return [line async for line in resp.aiter_lines()]


async def parse_lines(lines: list[str]) -> list[SseEvent]:
    async def gen() -> AsyncIterator[str]:
        for line in lines:
            yield line

    return [ev async for ev in parse_sse(gen())]


def persisted(events: list[SseEvent]) -> list[SseEvent]:
    """The stored events of a stream (they carry an id); live deltas and loomcycle's first
    `session` / `agent` frames (no id) are checked apart."""
    live = [ev for ev in events if ev.id is None]
    allowed = ("text_delta", "thinking_delta", "session", "agent")
    assert all(ev.event in allowed for ev in live), [ev.event for ev in live]
    return [ev for ev in events if ev.id is not None]


def assert_deltas_before_text(events: list[SseEvent], text: str) -> None:
    """Live text deltas, if the stream caught any, come before the stored text and add up to it."""
    kinds = [ev.event for ev in events]
    deltas = [ev for ev in events if ev.event == "text_delta"]
    if deltas:
        assert max(i for i, k in enumerate(kinds) if k == "text_delta") < kinds.index("text")
        assert "".join(ev.data["text"] for ev in deltas) == text


async def read_stream(client: httpx.AsyncClient, method: str, url: str, **kw: Any) -> tuple[list[str], list[SseEvent]]:
    headers = {"Accept": "text/event-stream", **kw.pop("headers", {})}
    async with client.stream(method, url, headers=headers, **kw) as resp:
        assert resp.status_code in (200, 202), (resp.status_code, await resp.aread())
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers.get("cache-control") == "no-cache"
        lines = await asyncio.wait_for(sse_lines(resp), 20)
    return lines, await parse_lines(lines)


# -- basics ---------------------------------------------------------------------------------------


async def test_healthz(api: Api) -> None:
    resp = await api.client.get("/healthz")
    assert resp.status_code == 200
    body = resp.json()
    assert body["ok"] is True and isinstance(body["version"], str)


async def test_the_listening_socket_is_tcp_so_nagle_is_off(api: Api) -> None:
    """asyncio sets TCP_NODELAY on accepted sockets only when the listener's proto is TCP; with
    proto 0 every small response waits for a delayed ACK (~40 ms)."""
    listeners = [sock for srv in api.server._server.servers for sock in srv.sockets]
    assert listeners and all(sock.proto == socket.IPPROTO_TCP for sock in listeners)


async def test_docs_and_openapi_are_served(api: Api) -> None:
    resp = await api.client.get("/openapi.json")
    assert resp.status_code == 200
    spec = resp.json()
    assert spec["info"]["title"] == "treadle"
    for path in ("/v1/runs", "/v1/runs/{run_id}", "/v1/runs/{run_id}/events", "/v1/runs/{run_id}/stream",
                 "/v1/runs/{run_id}/cancel", "/healthz"):
        assert path in spec["paths"], path
    assert "post" in spec["paths"]["/v1/runs"]
    docs = await api.client.get("/docs")
    assert docs.status_code == 200 and docs.headers["content-type"].startswith("text/html")
    assert "swagger" in docs.text.lower() and "/openapi.json" in docs.text


async def test_start_run_returns_202_then_completes(api: Api) -> None:
    resp = await api.client.post(
        "/v1/runs", json={"agent": "echo", "prompt": "ping", "user_id": "user_1", "metadata": {"ticket": 42}}
    )
    assert resp.status_code == 202
    body = resp.json()
    assert set(body) >= {"run_id", "status"} and body["status"] == "queued" and body["run_id"].startswith("r_")
    run_id = body["run_id"]
    api.started.append(run_id)

    run = await api.wait(run_id)
    assert set(run) == {
        "run_id", "agent", "user_id", "status", "stop_reason", "error", "iterations", "usage", "metadata",
        "interactive", "last_seq", "created_at", "updated_at", "completed_at",
        "parent_run_id", "root_run_id", "depth", "def_id", "def_content_sha256", "skill_def_ids",
        "agent_id", "session_id", "parent_context",  # loomcycle's (issue 18)
    }
    assert run["run_id"] == run_id and run["agent"] == "echo" and run["user_id"] == "user_1"
    assert (run["status"], run["stop_reason"], run["error"], run["iterations"]) == ("completed", "end_turn", None, 1)
    assert run["metadata"] == {"ticket": 42} and run["interactive"] is False
    assert run["usage"]["input_tokens"] > 0 and run["usage"]["output_tokens"] > 0
    assert run["completed_at"] is not None and run["completed_at"] >= run["created_at"]

    events = await api.events(run_id)
    assert [e["type"] for e in events] == ["user_input", "started", "text", "usage", "done"]
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5] and run["last_seq"] == 5
    assert events[2]["text"] == "ping" and events[4]["stop_reason"] == "end_turn"
    assert all("ts" in e for e in events)


async def test_status_progresses_queued_running_completed(api: Api) -> None:
    resp = await api.client.post("/v1/runs", json={"agent": "slow", "prompt": "take your time"})
    assert resp.status_code == 202 and resp.json()["status"] == "queued"
    run_id = resp.json()["run_id"]
    api.started.append(run_id)
    seen = ["queued"]

    async def completed() -> list[str] | None:
        status = (await api.run(run_id))["status"]
        if status != seen[-1]:
            seen.append(status)
        return seen if status == "completed" else None

    await wait_for(completed, 20, interval=0.02, what=f"the run to complete (saw {seen})")
    assert seen == ["queued", "running", "completed"]


async def test_tool_run_over_the_api_pairs_calls_and_results(api: Api) -> None:
    run_id = await api.start("tools", "count")
    run = await api.wait(run_id)
    assert (run["status"], run["iterations"]) == ("completed", 3)
    events = await api.events(run_id)
    calls = [e["tool_use"]["id"] for e in events if e["type"] == "tool_call"]
    results = [e["tool_use"]["id"] for e in events if e["type"] == "tool_result"]
    assert len(calls) == 2 and calls == results


async def test_segments_input(api: Api) -> None:
    segments = [
        {"role": "system", "content": [{"type": "trusted-text", "text": "be brief"}]},
        {"role": "user", "content": [{"type": "untrusted-block", "kind": "web_content", "text": "<p>page</p>"}]},
    ]
    run_id = await api.start("echo", None, segments=segments)
    await api.wait(run_id)
    events = await api.events(run_id)
    assert events[0]["segments"] == segments
    text = next(e["text"] for e in events if e["type"] == "text")
    assert text == "<web_content>\n&lt;p>page&lt;/p>\n</web_content>"  # the echo of the fenced prompt


async def test_events_from_seq(api: Api) -> None:
    run_id = await api.start("echo", "x")
    run = await api.wait(run_id)
    assert [e["seq"] for e in await api.events(run_id, from_seq=2)] == list(range(3, run["last_seq"] + 1))
    assert await api.events(run_id, from_seq=run["last_seq"]) == []
    resp = await api.client.get(f"/v1/runs/{run_id}/events", params={"from_seq": 1, "limit": 2})
    assert resp.status_code == 200
    body = resp.json()
    assert body["run_id"] == run_id and body["status"] == "completed"
    assert [e["seq"] for e in body["events"]] == [2, 3]
    assert_error(await api.client.get(f"/v1/runs/{run_id}/events", params={"from_seq": -1}), 422,
                 "validation_error", "from_seq")


async def test_list_runs(api: Api) -> None:
    run_id = await api.start("echo", "listed")
    await api.wait(run_id)
    resp = await api.client.get("/v1/runs", params={"status": "completed", "limit": 500})
    assert resp.status_code == 200
    runs = resp.json()["runs"]
    assert run_id in [r["run_id"] for r in runs] and all(r["status"] == "completed" for r in runs)
    assert_error(await api.client.get("/v1/runs", params={"status": "bogus"}), 422, "validation_error")
    assert_error(await api.client.get("/v1/runs", params={"limit": 0}), 422, "validation_error")


# -- SSE --------------------------------------------------------------------------------------------


async def test_sse_stream_has_ids_and_ends_after_done(api: Api) -> None:
    run_id = await api.start("tools", "stream me")
    lines, events = await read_stream(api.client, "GET", f"/v1/runs/{run_id}/stream")
    events = persisted(events)
    stored = await api.events(run_id)
    assert [ev.id for ev in events] == [e["seq"] for e in stored] == list(range(1, len(stored) + 1))
    assert [f"id: {e['seq']}" for e in stored] == [ln for ln in lines if ln.startswith("id:")]
    assert [ev.event for ev in events] == [e["type"] for e in stored]
    assert events[-1].event == "done" and events[-1].data["stop_reason"] == "end_turn"
    assert [ev.data for ev in events] == stored


async def test_sse_resume_with_last_event_id_and_from_seq(api: Api) -> None:
    run_id = await api.start("tools", "resume me")
    run = await api.wait(run_id)
    url = f"/v1/runs/{run_id}/stream"
    _, from_header = await read_stream(api.client, "GET", url, headers={"Last-Event-ID": "3"})
    assert from_header[0].event == "agent" and from_header[0].data["run_id"] == run_id  # loomcycle's first frame
    from_header = from_header[1:]
    assert all(ev.id is not None for ev in from_header)  # a replay has no live deltas
    assert [ev.id for ev in from_header] == list(range(4, run["last_seq"] + 1))
    _, from_query = await read_stream(api.client, "GET", url, params={"from_seq": 5})
    assert [ev.id for ev in from_query[1:]] == list(range(6, run["last_seq"] + 1))
    # the later of the two wins
    _, both = await read_stream(api.client, "GET", url, params={"from_seq": 2}, headers={"Last-Event-ID": "7"})
    assert [ev.id for ev in both[1:]] == list(range(8, run["last_seq"] + 1))
    _, nothing = await read_stream(api.client, "GET", url, headers={"Last-Event-ID": str(run["last_seq"])})
    assert [ev.event for ev in nothing] == ["agent"]
    for bad in (b"abc", b"-1", b"1.5", b"\xb2"):  # b"\xb2" is "²" in latin-1, and "²".isdigit() is True
        resp = await api.client.get(url, headers={b"Last-Event-ID": bad, b"Accept": b"text/event-stream"})
        assert_error(resp, 422, "validation_error", "Last-Event-ID")


async def test_sse_follows_a_live_run(api: Api) -> None:
    run_id = await api.start("slow", "live")
    _lines, frames = await read_stream(api.client, "GET", f"/v1/runs/{run_id}/stream")
    events = persisted(frames)
    assert [ev.event for ev in events] == ["user_input", "started", "text", "usage", "done"]
    assert [ev.id for ev in events] == [1, 2, 3, 4, 5]
    assert events[2].data["text"] == "live"
    assert_deltas_before_text(frames, "live")
    assert (await api.run(run_id))["status"] == "completed"


async def test_post_runs_with_accept_sse_streams_the_new_run(api: Api) -> None:
    lines, frames = await read_stream(api.client, "POST", "/v1/runs", json={"agent": "echo", "prompt": "streamed"})
    assert_deltas_before_text(frames, "streamed")
    events = persisted(frames)
    assert events[0].event == "user_input" and events[0].id == 1
    run_id = events[1].data["run_id"]
    api.started.append(run_id)
    assert [ev.event for ev in events] == ["user_input", "started", "text", "usage", "done"]
    assert events[2].data["text"] == "streamed"
    assert sum(1 for ln in lines if ln.startswith("id: ")) == len(events)


# -- cancel -----------------------------------------------------------------------------------------


async def test_cancel_a_running_run(api: Api) -> None:
    run_id = await api.start("forever", "loop")
    await api.wait(run_id, lambda r: r["iterations"] >= 2)
    resp = await api.client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "enough", "scope": "run"})
    assert resp.status_code == 200
    body = resp.json()
    assert body["run_id"] == run_id and body["cancel_requested"] is True
    assert body["status"] in ("queued", "running", "cancelled")
    run = await api.wait(run_id)
    assert (run["status"], run["stop_reason"]) == ("cancelled", "cancelled")
    events = await api.events(run_id)
    assert events[-1]["type"] == "done" and events[-1]["reason"] == "enough"
    calls = [e["tool_use"]["id"] for e in events if e["type"] == "tool_call"]
    results = [e["tool_use"]["id"] for e in events if e["type"] == "tool_result"]
    assert calls == results  # never separated, not even by a cancel
    again = await api.client.post(f"/v1/runs/{run_id}/cancel", json={"scope": "run"})
    assert again.status_code == 200 and again.json()["status"] == "cancelled"


async def test_cancel_a_finished_run_is_a_no_op(api: Api) -> None:
    run_id = await api.start("echo", "done already")
    await api.wait(run_id)
    resp = await api.client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "late", "scope": "run"})
    assert resp.status_code == 200
    assert resp.json() == {"run_id": run_id, "status": "completed", "cancel_requested": False}
    assert (await api.run(run_id))["stop_reason"] == "end_turn"


async def test_cancel_validates_its_body(api: Api) -> None:
    run_id = await api.start("echo", "x")
    assert_error(await api.client.post(f"/v1/runs/{run_id}/cancel", json={"why": "x"}), 422, "validation_error")


# -- idempotency ------------------------------------------------------------------------------------


async def test_idempotency_key_returns_the_same_run(api: Api) -> None:
    key = "idem-" + secrets.token_hex(6)
    first = await api.client.post("/v1/runs", json={"agent": "echo", "prompt": "once"},
                                  headers={"Idempotency-Key": key})
    second = await api.client.post("/v1/runs", json={"agent": "echo", "prompt": "twice"},
                                   headers={"Idempotency-Key": key})
    assert first.status_code == second.status_code == 202
    assert first.json()["created"] is True and second.json()["created"] is False
    run_id = first.json()["run_id"]
    api.started.append(run_id)
    assert second.json()["run_id"] == run_id
    await api.wait(run_id)
    events = await api.events(run_id)
    assert [e["text"] for e in events if e["type"] == "text"] == ["once"]  # the retry started nothing
    other = await api.client.post("/v1/runs", json={"agent": "echo", "prompt": "x"},
                                  headers={"Idempotency-Key": key + "-b"})
    assert other.json()["run_id"] != run_id
    api.started.append(other.json()["run_id"])


# -- errors -----------------------------------------------------------------------------------------


async def test_unknown_agent_is_400(api: Api) -> None:
    assert_error(await api.client.post("/v1/runs", json={"agent": "nobody", "prompt": "x"}), 400, "unknown_agent",
                 "nobody")
    # a near miss gets the closest name; every answer lists the known agents
    r = await api.client.post("/v1/runs", json={"agent": "ecoh", "prompt": "x"})
    message = r.json()["error"]
    assert "unknown agent 'ecoh'; did you mean 'echo'?" in message and "(known: " in message and "echo" in message


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"agent": "echo"}, "prompt or segments"),
        ({"agent": "echo", "segments": []}, "prompt or segments"),
        ({"agent": "echo", "prompt": "x", "user_id": "not valid!"}, "user_id"),
        ({"agent": "echo", "prompt": "x", "user_id": "u" * 129}, "user_id"),
        ({"agent": "echo", "prompt": "x", "temperature": 0.3}, "temperature"),
        ({"prompt": "x"}, "agent"),
        ({"agent": "echo", "segments": [{"role": "user", "content": []}]}, "segments"),
        ({"agent": "echo", "segments": [{"role": "user", "content": [{"type": "video", "text": "x"}]}]},
         "segments"),
        ({"agent": "echo", "prompt": "x", "metadata": "not an object"}, "metadata"),
    ],
)
async def test_validation_errors_are_422(api: Api, body: dict[str, Any], where: str) -> None:
    err = assert_error(await api.client.post("/v1/runs", json=body), 422, "validation_error", where)
    assert isinstance(err["details"], list) and err["details"]


async def test_malformed_json_is_422(api: Api) -> None:
    resp = await api.client.post("/v1/runs", content=b"{not json", headers={"content-type": "application/json"})
    assert_error(resp, 422, "validation_error")


async def test_interactive_runs_park_for_input(api: Api) -> None:
    run_id = await api.start("echo", "x", interactive=True)
    run = await api.wait(run_id, lambda r: r["status"] == "waiting")
    assert run["interactive"] is True and run["stop_reason"] is None
    # an interactive run: no scope means loomcycle's turn cancel; the whole run is scope "run"
    resp = await api.client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "test", "scope": "run"})
    assert resp.status_code == 200, resp.text
    assert (await api.wait(run_id))["status"] == "cancelled"


async def test_unknown_run_is_404(api: Api) -> None:
    missing = "r_" + secrets.token_hex(16)
    for method, path in (("GET", ""), ("GET", "/events"), ("GET", "/stream"), ("POST", "/cancel")):
        resp = await api.client.request(method, f"/v1/runs/{missing}{path}", headers={"Accept": "text/event-stream"})
        assert_error(resp, 404, "run_not_found", missing)


async def test_a_run_of_another_tenant_is_404(api: Api, db_url: str) -> None:
    pool = await open_pool(db_url, 1, name="test-api-other-tenant")
    try:
        store = RunStore(pool, jobs_in_db=False, requeue_after_s=3600)
        other, _ = await store.create(
            NewRun(tenant_id="other-" + secrets.token_hex(4), agent="echo",
                   segments=user_text("private"))
        )
        for method, path in (("GET", ""), ("GET", "/events"), ("GET", "/stream"), ("POST", "/cancel")):
            resp = await api.client.request(method, f"/v1/runs/{other.id}{path}")
            assert_error(resp, 404, "run_not_found")
        listed = (await api.client.get("/v1/runs", params={"limit": 500})).json()["runs"]
        assert other.id not in [r["run_id"] for r in listed]
        after = await store.get(other.tenant_id, other.id)
        assert after is not None and not after.cancel_requested  # the cross-tenant cancel changed nothing
        async with pool.connection() as conn:  # no worker may pick it up later
            await conn.execute("UPDATE runs SET status = 'cancelled' WHERE id = %s", (other.id,))
    finally:
        await pool.close()


async def test_unknown_route_and_method_are_json_errors(api: Api) -> None:
    assert_error(await api.client.get("/v1/nothing-here"), 404, "not_found")
    assert_error(await api.client.delete("/v1/runs"), 405, "method_not_allowed")


async def test_body_too_large_with_content_length(api: Api) -> None:
    body = b'{"agent":"echo","prompt":"' + b"x" * (MAX_BODY + 10) + b'"}'
    resp = await api.client.post("/v1/runs", content=body, headers={"content-type": "application/json"})
    assert "content-length" in resp.request.headers
    assert_error(resp, 413, "body_too_large", str(MAX_BODY))


async def test_body_too_large_chunked(api: Api) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"agent":"echo","prompt":"'
        for _ in range(8):
            yield b"x" * 1000
        yield b'"}'

    resp = await api.client.post("/v1/runs", content=chunks(), headers={"content-type": "application/json"})
    assert resp.request.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in resp.request.headers
    assert_error(resp, 413, "body_too_large", str(MAX_BODY))


async def test_a_body_just_under_the_limit_is_accepted(api: Api) -> None:
    prefix, suffix = b'{"agent":"echo","prompt":"', b'"}'
    body = prefix + b"y" * (MAX_BODY - len(prefix) - len(suffix)) + suffix
    assert len(body) == MAX_BODY

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 1000):
            yield body[i : i + 1000]

    for content in (body, chunks()):
        resp = await api.client.post("/v1/runs", content=content, headers={"content-type": "application/json"})
        assert resp.status_code == 202, resp.text
        api.started.append(resp.json()["run_id"])


# -- auth -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def authed(db_url: str, api: Api) -> AsyncIterator[httpx.AsyncClient]:
    """A second server with TREADLE_AUTH_TOKEN set and no workers of its own (the open server's
    workers, on the same database and config, drive its runs)."""
    server = BackgroundServer(settings(db_url, auth_token=TOKEN, workers=0), CONFIG)
    base = await server.start()
    client = httpx.AsyncClient(headers=ACCEPT_JSON, base_url=base, timeout=20.0)
    try:
        yield client
    finally:
        await client.aclose()
        await server.stop()


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/runs"), ("POST", "/v1/runs"), ("GET", "/v1/runs/r_x"), ("GET", "/v1/runs/r_x/events"),
     ("GET", "/v1/runs/r_x/stream"), ("POST", "/v1/runs/r_x/cancel")],
)
async def test_401_without_a_token(authed: httpx.AsyncClient, method: str, path: str) -> None:
    kw: dict[str, Any] = {"json": {"agent": "echo", "prompt": "x"}} if method == "POST" else {}
    resp = await authed.request(method, path, **kw)
    assert_error(resp, 401, "unauthorized", "missing bearer token")
    assert resp.headers.get("www-authenticate") .startswith("Bearer")


async def test_401_with_a_wrong_token(authed: httpx.AsyncClient) -> None:
    for header in (f"Bearer {TOKEN}x", "Bearer nope", f"Basic {TOKEN}"):
        resp = await authed.get("/v1/runs", headers={"Authorization": header})
        assert_error(resp, 401, "unauthorized")
    resp = await authed.post("/v1/runs", json={"agent": "echo", "prompt": "x"},
                             headers={"Authorization": "Bearer wrong"})
    assert_error(resp, 401, "unauthorized", "invalid bearer token")


async def test_the_right_token_is_let_in(authed: httpx.AsyncClient, api: Api) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert (await authed.get("/v1/runs", headers=auth)).status_code == 200
    resp = await authed.post("/v1/runs", json={"agent": "echo", "prompt": "with token"}, headers=auth)
    assert resp.status_code == 202, resp.text
    run_id = resp.json()["run_id"]
    api.started.append(run_id)
    run = await api.wait(run_id)  # the open server sees the same tenant's run
    assert run["status"] == "completed"
    got = await authed.get(f"/v1/runs/{run_id}", headers=auth)
    assert got.status_code == 200 and got.json()["status"] == "completed"


async def test_healthz_needs_no_token(authed: httpx.AsyncClient) -> None:
    assert (await authed.get("/healthz")).status_code == 200


