"""Helpers of the substrate tests: runtimes with the inline dispatcher, the API in-process (ASGI),
scripted mock agents and their tool results, and a mock that fills run ids into scripts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any

import httpx
import pytest

from tests.support.db import TEST_HOME
from treadle.api.app import create_app
from treadle.dispatch.inline import InlineDispatcher
from treadle.runtime import Runtime
from treadle.store.runs import NewRun
from treadle.testing import ACCEPT_JSON, open_test_runtime, user_text

TENANT = "default"


def substrate_runtime(
    url: str, config: dict[str, Any], **kw: Any
) -> AbstractAsyncContextManager[tuple[Runtime, InlineDispatcher]]:
    """`async with substrate_runtime(url, treadle_yaml_dict, providers=None):` → (runtime, inline
    dispatcher), with the substrate tests' settings (2 workers, one step per delivery)."""
    rest = {k: v for k, v in config.items() if k != "agents"}
    return open_test_runtime(config.get("agents", {}), database_url=url, config=rest, home=TEST_HOME, workers=2, **kw)


def client_for(rt: Runtime) -> httpx.AsyncClient:
    app = create_app(auth_token="s3cret", max_request_bytes=1 << 20)
    app.state.runtime = rt
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://treadle.test",
                             headers={**ACCEPT_JSON, "authorization": "Bearer s3cret"})


def scripted(*calls: tuple[str, dict[str, Any]], **agent: Any) -> dict[str, Any]:
    """A mock agent that makes `calls` (tool, input) in order, then says "done"."""
    script = [{"tool": tool, "input": inp} for tool, inp in calls] + [{"text": "done"}]
    tools = sorted({tool for tool, _ in calls})
    return {"model": "script", "tools": agent.pop("tools", tools), "mock": {"script": script}, **agent}


async def run_agent(rt: Runtime, disp: InlineDispatcher, agent: str, *, tenant: str = TENANT,
                    user_id: str | None = None, text: str = "go") -> Any:
    run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent=agent, segments=user_text(text), user_id=user_id))
    await disp.drain()
    done = await rt.runs.get(tenant, run.id)
    assert done is not None
    return done


async def tool_results(rt: Runtime, run_id: str, tenant: str = TENANT) -> list[tuple[bool, Any]]:
    """(is_error, JSON result or the error text) of each tool call, in order."""
    out: list[tuple[bool, Any]] = []
    for e in await rt.runs.events(tenant, run_id):
        if e.type == "tool_result":
            text = e.payload["text"]
            out.append((True, text) if e.payload["is_error"] else (False, json.loads(text)))
    return out


async def ok_results(rt: Runtime, run_id: str, tenant: str = TENANT) -> list[Any]:
    results = await tool_results(rt, run_id, tenant)
    errors = [r for err, r in results if err]
    assert not errors, errors
    return [r for _, r in results]


class TemplatingMock:
    """The mock provider, with placeholders in scripted tool inputs filled at call time:
    "$RUN" → this run's id, "$RESULT.<field>" → that field of the previous tool result (JSON),
    "$VAR.<name>" → `vars[name]` (set by the test). Deterministic for a given transcript."""

    name = "mock"

    def __init__(self) -> None:
        from treadle.providers.mock import MockProvider

        self.inner = MockProvider()
        self.vars: dict[str, Any] = {}
        self.systems: list[str] = []

    async def call(self, req: Any, on_delta: Any = None) -> Any:
        from treadle.domain.content import ToolResultBlock, ToolUseBlock

        self.systems.append(req.system)
        resp = await self.inner.call(req, on_delta)
        last: Any = None
        for m in req.messages:
            for b in m.content:
                if isinstance(b, ToolResultBlock):
                    last = b.content
        run_id = req.run.run_id if req.run else ""

        def fill(v: Any) -> Any:
            if isinstance(v, dict):
                return {k: fill(x) for k, x in v.items()}
            if isinstance(v, list):
                return [fill(x) for x in v]
            if v == "$RUN":
                return run_id
            if isinstance(v, str) and v.startswith("$RESULT."):
                text = last if isinstance(last, str) else "".join(getattr(p, "text", "") for p in last or [])
                return json.loads(text).get(v.removeprefix("$RESULT."))
            if isinstance(v, str) and v.startswith("$VAR."):
                return self.vars[v.removeprefix("$VAR.")]
            return v

        resp.content = [ToolUseBlock(b.id, b.name, fill(b.input)) if isinstance(b, ToolUseBlock) else b
                        for b in resp.content]
        return resp


@pytest.fixture
async def open_rt(migrated_db_url: str) -> AsyncIterator[Any]:
    """`await open_rt(config_dict, providers=None)` → (runtime, inline dispatcher), on a migrated
    database of the test's own; closed after the test (substrate and team tests' conftest)."""
    async with AsyncExitStack() as stack:

        async def factory(config: dict[str, Any], **kw: Any) -> Any:
            return await stack.enter_async_context(substrate_runtime(migrated_db_url, config, **kw))

        yield factory
