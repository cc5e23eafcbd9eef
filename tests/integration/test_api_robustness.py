"""Bad input never becomes a 500: every route of the API, with odd path values (a NUL, a very
long name, `..`, an unknown id) and malformed bodies, answers a 4xx in the `{"code","error"}`
shape; and a NUL character from a caller, a model or a tool is stored (as U+FFFD) instead of
failing the step that writes it."""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

import httpx
import pytest

from treadle.api.app import api_routers, create_app
from treadle.store.db import dumps_jsonb, without_nul
from treadle.testing import ACCEPT_JSON

AGENTS: dict[str, Any] = {
    "echo": {"model": "echo"},
    "nul": {"model": "script", "tools": ["Memory"], "mock": {"script": [
        {"tool": "Memory", "input": {"op": "set", "scope": "agent", "key": "k", "value": {"a\u0000": "b\u0000"}}},
        # a key (a text column) cannot hold a NUL: that call is the tool's error, not a crash
        {"tool": "Memory", "input": {"op": "set", "scope": "agent", "key": "k\u0000", "value": 1}},
        {"text": "done\u0000 here"},
    ]}},
}
BODIES = [
    b"", b"null", b"[]", b"{}", b'"text"', b"\xff\xfe", b'{"op": 5}', b'{"op": "get"}',
    b'{"op":"create","name":"x","overlay":null}', b'{"op":"list","retired":"yes"}', b'{"agent": 5}',
    b'{"agent":"echo","prompt":5}', b'{"text": null}', b'{"answer": 5}', b'{"value": {"a": [1, 2]}}',
    b'{"agent":"echo","prompt":"a\\u0000b"}', b'{"value":"a\\u0000b","text":"x\\u0000","answer":"\\u0000"}',
]
PATH_VALUES = ("x", "%00", "a" * 300, "..", "r_0")
PARAMS = ("{run_id}", "{id}", "{name}", "{ident}", "{interrupt_id}", "{user_id}", "{tenant}", "{scope}",
          "{scope_id}", "{key}", "{channel}")
#: routes that answer in OpenAI's error shape (docs/openai.md)
OPENAI_PATHS = ("/v1/chat/completions", "/v1/embeddings", "/v1/models", "/v1/responses")


def bad_error_shape(path: str, doc: Any) -> bool:
    if path.startswith(OPENAI_PATHS):
        return set(doc) != {"error"} or set(doc["error"]) != {"message", "type", "param", "code"}
    return set(doc) < {"code", "error"}


def client(rt: Any) -> httpx.AsyncClient:
    app = create_app(auth_token=None, max_request_bytes=1 << 20, routers=api_routers())
    app.state.runtime = rt
    return httpx.AsyncClient(headers=ACCEPT_JSON, transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                             base_url="http://treadle")


async def test_no_route_answers_500_to_bad_input(open_runtime: Any, migrated_db_url: str) -> None:
    # a database of its own: junk that is valid input (e.g. an OperatorTokenDef create, which
    # turns open mode off) must not leak into other tests
    rt, disp = await open_runtime(AGENTS, url=migrated_db_url)
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    async with client(rt) as c:
        r = await c.post("/v1/runs", json={"agent": "echo", "prompt": "hi"})
        await disp.drain()
        real_run = r.json()["run_id"]
        routes = [route for router in api_routers() for route in router.routes]
        assert len(routes) > 30
        for route in routes:
            path: str = route.path  # type: ignore[attr-defined]
            if path.endswith("/stream") or "_await" in path:
                continue  # long-lived by design; covered by their own tests
            for value in (*PATH_VALUES, real_run):
                url = path
                for param in PARAMS:
                    url = url.replace(param, value)
                for method in sorted(route.methods - {"HEAD"}):  # type: ignore[attr-defined]
                    for body in (BODIES if method in ("POST", "PUT", "PATCH", "DELETE") else [b""]):
                        for query in ("", "?status=weird&limit=-1&from_seq=abc&k=0"):
                            resp = await c.request(method, url + query, content=body,
                                                   headers={"content-type": "application/json"})
                            statuses[resp.status_code] += 1
                            if resp.status_code >= 500 or (resp.status_code >= 400
                                                           and bad_error_shape(path, resp.json())):
                                failures.append(f"{method} {url + query} {body[:40]!r} → {resp.status_code} "
                                                f"{resp.text[:120]}")
    assert failures == [], failures[:10]
    assert statuses[422] > 100 and statuses[404] > 100  # the requests did reach the handlers


async def test_a_nul_from_a_caller_a_model_or_a_tool_is_stored_not_fatal(open_runtime: Any) -> None:
    rt, disp = await open_runtime(AGENTS)
    async with client(rt) as c:
        r = await c.post("/v1/runs", json={"agent": "nul", "prompt": "zero\u0000byte", "user_id": "u1"})
        assert r.status_code == 202, r.text
        await disp.drain()
        run_id = r.json()["run_id"]
        run = (await c.get(f"/v1/runs/{run_id}")).json()
        assert run["status"] == "completed", run
        events = (await c.get(f"/v1/runs/{run_id}/events")).json()["events"]
        text = json.dumps(events, ensure_ascii=False)
        assert "\u0000" not in text
        assert "zero\ufffdbyte" in text and "done\ufffd here" in text
        assert await rt.memory.get("default", "agent", "nul", "k") == (True, {"a\ufffd": "b\ufffd"})
        results = [e for e in events if e["type"] == "tool_result"]
        assert [r["is_error"] for r in results] == [False, True]  # the NUL key: the tool's error, not a crash
        bad = await c.get("/v1/runs/%00")
        assert (bad.status_code, bad.json()["code"]) == (422, "invalid_input")


def test_dumps_jsonb_only_rewrites_real_nul_characters() -> None:
    plain = {"a": "plain", "n": [1, 2.5, None, True], "é": "ü\u2028"}
    assert json.loads(dumps_jsonb(plain)) == plain
    beyond = {"big": 2**70, 1: "int key", "lone": "\ud800"}  # what orjson refuses: the stdlib encodes it
    assert json.loads(dumps_jsonb(beyond)) == {"big": 2**70, "1": "int key", "lone": "\ud800"}
    literal = {"a": "a backslash-u0000 is text: \\u0000"}
    assert json.loads(dumps_jsonb(literal)) == literal  # not a NUL: kept as written
    assert json.loads(dumps_jsonb({"k\u0000": ["x\u0000", 1, None]})) == {"k\ufffd": ["x\ufffd", 1, None]}
    assert without_nul(("a\u0000",)) == ["a\ufffd"]


async def post_and_leave(app: Any, path: str) -> list[int]:
    """POST half a body to `path` and disconnect (ASGI, as uvicorn tells the app); the statuses
    the app started answering with."""
    chunks: list[dict[str, Any]] = [{"type": "http.request", "body": b'{"op": "li', "more_body": True}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"treadle"), (b"content-type", b"application/json"), (b"content-length", b"100")],
             "client": ("127.0.0.1", 1), "server": ("treadle", 80)}
    await app(scope, receive, send)
    return [m["status"] for m in sent if m["type"] == "http.response.start"]


async def test_a_client_that_leaves_mid_body_is_no_server_error(
    open_runtime: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A client gone while its body is read (a fuzzer's timeout, a dropped connection) ends the
    request quietly: 499 to no one, no `unhandled error` traceback, no 500 counted."""
    rt, _ = await open_runtime(AGENTS)
    app = create_app(auth_token=None, max_request_bytes=1 << 20, routers=api_routers())
    app.state.runtime = rt
    # a body the route reads (499), and one FastAPI reads (its 400 "error parsing the body"): to no one
    for path, status in (("/v1/_agentdef", 499), ("/v1/runs", 400)):
        with caplog.at_level(logging.INFO):
            assert await post_and_leave(app, path) in ([status], []), path
        assert "unhandled error" not in caplog.text, caplog.text
