"""loomcycle's conversation meta-tools, under its names and argument schemas
(`internal/api/mcp/tools.go`): `history` (the History tool's ops for the caller, as
POST /v1/_history) and `compact_run` (a run's manual compaction by loomcycle's `agent_id`, or by
treadle's `run_id`, as POST /v1/runs/{run_id}/compact) — plus `replay_session` (POST
/v1/sessions/{id}/replay), which loomcycle offers over HTTP and its clients only."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from treadle.api import loomcycle
from treadle.api.mcp.registry import _Args, tool
from treadle.api.sessions import caller_history
from treadle.errors import NotFound
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.wire import HistoryRequest


@tool(
    "history",
    "History tool ops (list/get/search/rename/annotate/pin/archive/recap/resume/related): browse, "
    "search, annotate and recap past chats (a chat = a conversation session). scope: tenant (default) or user "
    "(the token's subject's chats); a chat outside the scope is not found. recap writes the chat's summary with "
    "its agent's model.",
    HistoryRequest,
)
async def history(rt: Runtime, who: Principal, a: HistoryRequest) -> dict[str, Any]:
    return await caller_history(rt, who, a)


class CompactRunArgs(_Args):
    #: loomcycle's key: the agent_id's newest run; treadle's `run_id` names the run itself
    agent_id: str | None = Field(default=None, min_length=1, max_length=128)
    run_id: str | None = Field(default=None, min_length=1, max_length=128)
    reason: str | None = Field(default=None, max_length=1024, description="Optional free-text note (logged).")

    @model_validator(mode="after")
    def _one_id(self) -> CompactRunArgs:
        if (self.run_id is None) == (self.agent_id is None):
            raise ValueError("give agent_id (loomcycle's) or run_id, not both")
        return self


@tool(
    "compact_run",
    "Compact a run's conversation: summarize the history to free context and continue from the "
    "summary. Targets the run by agent_id (its newest run) or run_id. A live run must be PARKED (awaiting "
    "input) — a mid-turn run is refused (run_busy). Returns {run_id, compacted, before_tokens, after_tokens, "
    "applied}: applied is live (a parked run), marker (an ended run's next continuation replays it) or noop "
    "(too short). Honors the agent's compaction settings.",
    CompactRunArgs,
)
async def compact_run(rt: Runtime, who: Principal, a: CompactRunArgs) -> dict[str, Any]:
    run_id = a.run_id
    if run_id is None:
        assert a.agent_id is not None
        run = await loomcycle.latest_by_agent_id(rt, who.tenant_id, a.agent_id)
        if run is None:
            raise NotFound(f"agent {a.agent_id!r} not found", code="agent_not_found")
        run_id = run.id
    return await rt.compact_run(who.tenant_id, run_id, a.reason)


class ReplayArgs(_Args):
    session_id: str = Field(min_length=1, max_length=128, description="the source session")
    agent: str = Field(min_length=1, max_length=128, description="the agent the new session continues with")
    compress: bool = False


@tool(
    "replay_session",
    "A NEW session of `agent` seeded with a session's conversation (reasoning left out), "
    "continued like any session; compress summarizes the carried history first → {new_session_id, seed_run_id, "
    "events_copied, compacted} (POST /v1/sessions/{id}/replay).",
    ReplayArgs,
)
async def replay_session(rt: Runtime, who: Principal, a: ReplayArgs) -> dict[str, Any]:
    return await rt.replay_session(who.tenant_id, a.session_id, a.agent.strip(), a.compress)
