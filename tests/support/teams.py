"""Helpers of the team tests: the review team of issue 40 (writer → two parallel reviewers →
consolidator → pushback once → terminal) and a provider that plays its agents deterministically."""

from __future__ import annotations

from typing import Any

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
    """writer: v1, then v2 once the editor asked for rework; reviewers: "<who> read <draft>";
    editor: pushback while it reads v1, success on v2."""
    who, task = req.system, _task(req)
    assert not any(isinstance(b, ToolResultBlock) for m in req.messages for b in m.content)
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
