"""Helpers of the team tests: the review team of issue 40 (writer → two parallel reviewers →
consolidator → pushback once → terminal) and a provider that plays its agents deterministically."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from tests.support.fake_http import Reply, Request
from tests.support.vendors.base import text
from tests.support.vendors.openai import FakeOpenAI
from treadle.domain.content import ToolResultBlock
from treadle.providers.base import ModelRequest
from treadle.testing import ScriptedProvider

REVIEW_TEAM: dict[str, Any] = {
    "entry": "write",
    "max_iterations": 3,
    "states": [
        {"state": "write", "handler": {"kind": "agent", "agent": "writer"}},
        {"state": "review", "handler": {"kind": "parallel", "agents": ["reviewer-a", "reviewer-b"],
                                        "consolidator": "editor"}},
        {"state": "done", "handler": {"kind": "terminal"}},
    ],
    "transitions": [
        {"from": "write", "to": "review", "on": "success"},
        {"from": "review", "to": "write", "on": "pushback:rework"},
        {"from": "review", "to": "done", "on": "success"},
    ],
    "colors": {"states": {"write": "blue"}},
}

AGENTS = {name: {"provider": "players", "model": "echo", "system_prompt": name}
          for name in ("writer", "reviewer-a", "reviewer-b", "editor")}


def _task(req: ModelRequest) -> str:
    return next((m.text() for m in req.messages if m.role == "user" and m.text()), "")


def play(req: ModelRequest) -> str:
    assert not any(isinstance(b, ToolResultBlock) for m in req.messages for b in m.content)
    return play_text(req.system, _task(req))


def play_text(who: str, task: str) -> str:
    """writer: v1, then v2 once the editor asked for rework; reviewers: "<who> read <draft>";
    editor: pushback while it reads v1, success on v2."""
    if who == "writer":
        return "draft v2" if "rework" in task else "draft v1"
    if who.startswith("reviewer"):
        return f"{who} read {'draft v2' if 'draft v2' in task else 'draft v1'}"
    if who == "editor":
        if "draft v1" in task:
            return "please rework the intro\nsignal: pushback:rework"
        return "approved: draft v2\nsignal: success"
    return task


def players() -> ScriptedProvider:
    return ScriptedProvider(play, name="players")


class PlayersOpenAI(FakeOpenAI):
    """OpenAI's chat wire on loopback, answering as `play_text` for the agent its system prompt
    names (for `treadle serve` subprocesses, which cannot take an in-process provider). Each
    answer streams slowly (`delay_s` per chunk) so that a kill lands while agents work."""

    def __init__(self, delay_s: float = 0.2) -> None:
        super().__init__()
        self.delay_s = delay_s

    def _handle(self, req: Request) -> Reply:
        refused, body = self.accept(req)
        if refused is not None:
            return refused
        msgs = body["messages"]
        who = next((_text(m) for m in msgs if m["role"] in ("system", "developer")), "")
        task = next((_text(m) for m in msgs if m["role"] == "user"), "")
        return self.turn_reply(text(play_text(who.split("\n", 1)[0], task), chunk_delay_s=self.delay_s), body, req)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


class PlayersInThread:
    """`PlayersOpenAI` served from a thread of its own (for tests whose code under test runs in
    threads, such as the simulated Lambda environments of tests/cloud)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.fake = PlayersOpenAI(delay_s)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="players", daemon=True)

    def __enter__(self) -> PlayersOpenAI:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.fake.server.start(), self._loop).result(10)
        return self.fake

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.fake.server.close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
