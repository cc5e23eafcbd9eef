"""HTTP, WebFetch and WebSearch as agents use them: real runs (mock script agents, real Postgres,
inline dispatcher) against loopback servers. The loopback servers are reached under names a test
resolver maps to 127.0.0.1, exempted one by one through TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.loopback import Answer, Loopback, Seen, TableResolver
from treadle.builtins.registry import default_registry
from treadle.config import Settings, parse_config
from treadle.dispatch.inline import InlineDispatcher
from treadle.errors import ToolError
from treadle.runtime import Runtime
from treadle.security.network import NetworkSetup
from treadle.store.runs import NewRun
from treadle.testing import user_text
from treadle.tools.base import ToolResult

TENANT = f"t_reach_{secrets.token_hex(4)}"
NAMES = TableResolver({"api.test": ["127.0.0.1"], "docs.test": ["127.0.0.1"], "search.test": ["127.0.0.1"],
                       "sneaky.test": ["127.0.0.1"]})
NETWORK = NetworkSetup(env={"TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST": "api.test, docs.test, search.test"},
                       resolver=NAMES)

Open = Callable[..., Awaitable[Runtime]]


@pytest.fixture
async def open_rt(db_url: str, tmp_path: Path) -> AsyncIterator[Open]:
    opened: list[Runtime] = []

    async def open_(agents: dict[str, Any], **sections: Any) -> Runtime:
        disp = InlineDispatcher()
        rt = await Runtime.open(
            Settings(database_url=db_url, home=tmp_path, workers=1, chain_steps=1),
            parse_config({"agents": agents, **sections}),
            dispatcher_factory=lambda _p, _u: disp,
            registry=default_registry(NETWORK),
        )
        disp.handler = rt.engine.handle
        opened.append(rt)
        return rt

    yield open_
    for rt in opened:
        await rt.close()


def script(tool: str, args: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "script", "tools": [tool], **extra,
            "mock": {"script": [{"tool": tool, "input": args}, {"text": "done"}]}}


async def run(rt: Runtime, agent: str, allowed_hosts: list[str] | None = None) -> list[dict[str, Any]]:
    """Start a run (the caller narrowing its hosts with `allowed_hosts`), drive it to its end; its
    tool_result payloads."""
    record, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent=agent, segments=user_text("go"),
                                          allowed_hosts=allowed_hosts))
    dispatcher = rt.dispatcher
    assert isinstance(dispatcher, InlineDispatcher)
    await dispatcher.drain()
    done = await rt.runs.get(TENANT, record.id)
    assert done is not None and done.status == "completed", done
    return [e.payload for e in await rt.runs.events(TENANT, record.id) if e.type == "tool_result"]


# -- HTTP -----------------------------------------------------------------------------------------


async def test_an_agent_calls_http_in_a_real_run(open_rt: Open) -> None:
    def create(s: Seen) -> Answer:
        return Answer(201, {"Content-Type": "application/json", "X-Trace": "t1"},
                      json.dumps({"got": json.loads(s.body)}).encode())

    async with Loopback({"/items": create}) as srv:
        args = {"method": "POST", "url": srv.url("/items", host="api.test"), "body": {"name": "widget"},
                "headers": {"X-Client": "agent"}}
        rt = await open_rt({"caller": script("HTTP", args)}, http={"allowed_hosts": ["api.test"]})
        [result] = await run(rt, "caller")
        [seen] = srv.seen
    assert not result["is_error"], result["text"]
    head, _, body = result["text"].partition("\n\n")
    assert head.splitlines()[0] == f"HTTP POST {args['url']} -> 201 Created"
    assert "X-Trace: t1" in head.splitlines()
    assert json.loads(body) == {"got": {"name": "widget"}}
    assert seen.headers["content-type"] == "application/json" and seen.headers["x-client"] == "agent"
    # the external call's idempotency key is its tool_use id, stable across re-runs of the step
    assert seen.headers["idempotency-key"] == result["tool_use"]["id"]


async def test_get_sends_no_idempotency_key_and_a_long_body_is_truncated(open_rt: Open) -> None:
    async with Loopback({"/big": lambda s: Answer.text("é" * 300)}) as srv:
        rt = await open_rt({"big": script("HTTP", {"url": srv.url("/big", host="api.test")})},
                           http={"allowed_hosts": ["api.test"], "max_response_bytes": 101})
        [result] = await run(rt, "big")
        assert "idempotency-key" not in srv.seen[0].headers
    body = result["text"].partition("\n\n")[2]
    assert body == "é" * 50 + "\n[truncated at 101 bytes]"  # the split character is dropped, not mangled


async def test_the_request_body_is_capped_and_unknown_arguments_are_refused(open_rt: Open) -> None:
    rt = await open_rt({"a": {"tools": ["HTTP"]}}, http={"allowed_hosts": ["api.test"], "max_request_bytes": 10})
    http = rt.registry.get("HTTP")
    assert http is not None
    ctx = rt.tool_context(TENANT, "r_none", "a")
    with pytest.raises(ToolError, match="limit is 10") as err:
        await http.invoke(ctx, {"method": "POST", "url": "http://api.test/", "body": "x" * 11})
    assert err.value.code == "request_too_large"
    with pytest.raises(ToolError, match=r"unknown field 'timeout'.*accepted: body, headers, method, url") as err:
        await http.invoke(ctx, {"url": "http://api.test/", "timeout": 5})
    assert err.value.code == "unknown_field"
    for bad, why in (({"url": "http://api.test/", "method": "TRACE"}, "method must be one of"),
                     ({"url": "http://api.test/", "headers": {"Host": "x"}}, "set by the transport"),
                     ({"url": "http://api.test/", "body": "x"}, "GET request takes no body"),
                     ({"url": "ftp://api.test/"}, "only http and https")):
        with pytest.raises(ToolError, match=why):
            await http.invoke(ctx, bad)


async def test_without_an_operator_floor_nothing_is_reachable(open_rt: Open) -> None:
    async with Loopback({"/": lambda s: Answer.text("reached")}) as srv:
        rt = await open_rt({"a": script("HTTP", {"url": srv.url(host="api.test")})})
        [result] = await run(rt, "a")
        assert result["is_error"] and "operator floor allows no host" in result["text"]
        assert srv.seen == []


async def test_the_agent_and_the_run_narrow_the_floor(open_rt: Open) -> None:
    async with Loopback({"/": lambda s: Answer.text("reached")}) as srv:
        api, docs = srv.url(host="api.test"), srv.url(host="docs.test")
        rt = await open_rt(
            {"narrow": script("HTTP", {"url": docs}, allowed_hosts=["api.test"]),
             "free": script("HTTP", {"url": api})},
            http={"allowed_hosts": ["api.test", "docs.test"]},
        )
        [by_agent] = await run(rt, "narrow")
        assert by_agent["is_error"] and "not in the agent allowed_hosts (api.test)" in by_agent["text"]
        [by_run] = await run(rt, "free", allowed_hosts=["docs.test"])
        assert by_run["is_error"] and "not in the run allowed_hosts (docs.test)" in by_run["text"]
        [widening] = await run(rt, "free", allowed_hosts=["*", "sneaky.test"])
        assert not widening["is_error"], widening["text"]  # `*` from the run stays inside the floor
        assert len(srv.seen) == 1
    rt2 = await open_rt({"sneak": script("HTTP", {"url": srv.url(host="sneaky.test")})},
                        http={"allowed_hosts": ["api.test"]})
    [refused] = await run(rt2, "sneak", allowed_hosts=["sneaky.test"])
    assert refused["is_error"] and "not in the operator floor" in refused["text"]


# -- WebFetch -------------------------------------------------------------------------------------

PAGE = """<!doctype html><html><head><title>Treadle news</title>
<style>body { color: red }</style><script>var tracking = "SECRET-SCRIPT";</script></head>
<body><nav>Home | About</nav><h1>Release notes</h1>
<p>Version <b>2</b> adds <a href="/docs">durable runs</a>.</p>
<ul><li>first</li><li>second</li></ul>
<script>document.write("SCRIPT-TEXT")</script><noscript>enable JS</noscript></body></html>"""


async def test_webfetch_turns_a_page_into_readable_text(open_rt: Open) -> None:
    async with Loopback({"/page": lambda s: Answer.text(PAGE, "text/html; charset=utf-8"),
                         "/moved": lambda s: Answer.redirect("/page", 301)}) as srv:
        rt = await open_rt({"reader": script("WebFetch", {"url": srv.url("/moved", host="docs.test")})},
                           http={"allowed_hosts": ["docs.test"]})
        [result] = await run(rt, "reader")
    assert not result["is_error"], result["text"]
    text = result["text"]
    assert text.splitlines()[0].startswith(f"WebFetch {srv.url('/moved', host='docs.test')} -> 200 OK (redirected")
    assert text.splitlines()[2] == "Title: Treadle news"
    for wanted in ("# Release notes", "Version **2** adds [durable runs](/docs).", "- first",
                   "- second"):
        assert wanted in text
    for dropped in ("SECRET-SCRIPT", "SCRIPT-TEXT", "color: red", "enable JS", "Home | About", "<"):
        assert dropped not in text


async def test_webfetch_caps_its_output_and_refuses_binary(open_rt: Open) -> None:
    long_page = "<html><body>" + "<p>lorem ipsum</p>" * 200 + "</body></html>"
    async with Loopback({"/long": lambda s: Answer.text(long_page, "text/html"),
                         "/img": lambda s: Answer(200, {"Content-Type": "image/png"}, b"\x89PNG....")}) as srv:
        rt = await open_rt({"a": {"tools": ["WebFetch"]}},
                           http={"allowed_hosts": ["docs.test"], "max_response_bytes": 200})
        fetch = rt.registry.get("WebFetch")
        assert fetch is not None
        ctx = rt.tool_context(TENANT, "r_none", "a")
        out = await fetch.invoke(ctx, {"url": srv.url("/long", host="docs.test")})
        assert isinstance(out, ToolResult) and not out.is_error
        body = out.content.partition("\n\n")[2]
        assert body.endswith("\n[truncated at 200 bytes]") and len(body.encode()) <= 200 + 25
        with pytest.raises(ToolError, match="image/png, not a text page"):
            await fetch.invoke(ctx, {"url": srv.url("/img", host="docs.test")})
        with pytest.raises(ToolError, match="unknown field 'format'"):
            await fetch.invoke(ctx, {"url": srv.url("/long", host="docs.test"), "format": "text"})


# -- WebSearch ------------------------------------------------------------------------------------


def searxng(s: Seen) -> Answer:
    """SearXNG's JSON API (`/search?q=&format=json&pageno=`): 3 results on page 1, 2 on page 2, none after."""
    if s.query.get("format") != ["json"]:
        return Answer.text("<html>forbidden</html>", "text/html", status=403)
    page = int(s.query.get("pageno", ["1"])[0])
    q = s.query["q"][0]
    numbers = {1: [1, 2, 3], 2: [4, 5]}.get(page, [])
    return Answer.json({
        "query": q, "number_of_results": 5,
        "results": [{"url": f"https://example.org/{q}/{n}", "title": f"{q} result {n}", "content": f"about {q} {n}",
                     "engine": "duckduckgo", "parsed_url": ["https", "example.org", f"/{n}", "", "", ""],
                     "engines": ["duckduckgo"], "positions": [n], "score": 1.0 / n, "category": "general"}
                    for n in numbers],
        "answers": [], "corrections": [], "infoboxes": [], "suggestions": [], "unresponsive_engines": [],
    })


async def test_websearch_against_a_searxng_instance(open_rt: Open) -> None:
    async with Loopback({"/search": searxng}) as srv:
        search = {"driver": "searxng", "base_url": srv.url("/", host="search.test")}
        rt = await open_rt({"finder": script("WebSearch", {"query": "durable agents", "max_results": 4})},
                           search=search)
        [result] = await run(rt, "finder")
        assert [s.query["pageno"] for s in srv.seen] == [["1"], ["2"]]
    assert not result["is_error"], result["text"]
    doc = json.loads(result["text"])
    assert doc["query"] == "durable agents"
    assert [r["title"] for r in doc["results"]] == [f"durable agents result {n}" for n in (1, 2, 3, 4)]
    assert doc["results"][0] == {"title": "durable agents result 1", "url": "https://example.org/durable agents/1",
                                 "snippet": "about durable agents 1"}


async def test_websearch_errors(open_rt: Open) -> None:
    rt = await open_rt({"a": script("WebSearch", {"query": "anything"})})
    [result] = await run(rt, "a")
    assert result["is_error"] and "websearch_not_configured" in result["text"]
    tool = rt.registry.get("WebSearch")
    assert tool is not None
    ctx = rt.tool_context(TENANT, "r_none", "a")
    with pytest.raises(ToolError) as err:
        await tool.invoke(ctx, {"query": "x"})
    assert err.value.code == "websearch_not_configured"
    with pytest.raises(ToolError, match="max_results must be an integer from 1 to 100"):
        await tool.invoke(ctx, {"query": "x", "max_results": 101})

    async with Loopback({"/search": lambda s: Answer.text("<html>forbidden</html>", "text/html", 403)}) as srv:
        for base, why in ((srv.url("/", host="search.test"), "refused format=json"),
                          (srv.url("/"), "loopback address: refused")):  # not exempted: the address rules hold
            rt2 = await open_rt({"b": {"tools": ["WebSearch"]}}, search={"driver": "searxng", "base_url": base})
            tool2 = rt2.registry.get("WebSearch")
            assert tool2 is not None
            with pytest.raises(ToolError, match=why) as err:
                await tool2.invoke(rt2.tool_context(TENANT, "r_none", "b"), {"query": "x"})
            assert err.value.code == "websearch_failed"


async def test_websearch_sends_the_tenants_credential_named_in_search_headers(
    open_rt: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`search.headers` naming `${credential.NAME}` (issue 42 item 3): the calling run's tenant's
    value goes in the header, never into the transcript; a tenant without it sends no such header."""
    import base64
    import os

    from tests.support.e2e import dump_all
    from treadle.governance import credentials as creds
    from treadle.governance.credentials import TenantCredentials

    monkeypatch.setenv(creds.KEY_ENV, base64.b64encode(os.urandom(32)).decode())
    creds.process_sealer.cache_clear()
    value = "searx-" + secrets.token_hex(16)

    def echo_auth(s: Seen) -> Answer:  # an instance that echoes the header it got into a result
        answer = searxng(s)
        doc = json.loads(answer.body)
        for r in doc["results"]:
            r["content"] = f"auth was {s.headers.get('authorization')}"
        return Answer.json(doc)

    try:
        async with Loopback({"/search": echo_auth}) as srv:
            search = {"driver": "searxng", "base_url": srv.url("/", host="search.test"),
                      "headers": {"Authorization": "Bearer ${credential.searx}", "X-Plain": "yes"}}
            rt = await open_rt({"finder": script("WebSearch", {"query": "q", "max_results": 1})}, search=search)
            await TenantCredentials(rt.pool).create(TENANT, "tenant", "", "searx", value, updated_by="test")
            [result] = await run(rt, "finder")
            assert [s.headers.get("authorization") for s in srv.seen] == [f"Bearer {value}"]
            assert srv.seen[0].headers.get("x-plain") == "yes"
            assert "auth was Bearer [redacted" in result["text"] and value not in result["text"]
            # another tenant, without the credential: the header is left out, never sent literally
            await rt.start_run(NewRun(tenant_id=TENANT + "x", agent="finder", segments=user_text("go")))
            assert isinstance(rt.dispatcher, InlineDispatcher)
            await rt.dispatcher.drain()
            assert "authorization" not in srv.seen[-1].headers and srv.seen[-1].headers.get("x-plain") == "yes"
            assert value not in await dump_all(rt.database_url)
    finally:
        creds.process_sealer.cache_clear()
