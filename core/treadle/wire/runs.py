"""Runs: the bodies of POST /v1/runs (loomcycle's shape, treadle's fields additive), cancel,
input, tool results, batch runs and agent cancels, and what those routes answer."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator

from treadle.config import CompactionConfig, SamplingConfig
from treadle.domain.ids import IDENTIFIER_PATTERN, is_identifier
from treadle.domain.runs import RunStatus
from treadle.domain.segments import Segment
from treadle.specs.hosts import parse_host_patterns
from treadle.wire._base import Request, Response

#: what every vendor accepts as a tool name (Anthropic's rule is the strictest)
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: limits of application tools (builtins/client.py holds the same numbers; a unit test keeps them equal)
MAX_CLIENT_TOOLS = 64
MAX_CLIENT_TOOL_TIMEOUT_S = 7 * 24 * 3600.0
MAX_TOOL_RESULT_CHARS = 256 * 1024
MAX_INPUT_CHARS = 256_000
MAX_BATCH = 32

#: `user_credentials`: at most 32 names, each value at most 8 KiB (mcp/credentials.py seals them)
UserCredentials = Annotated[
    dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")],
         Annotated[str, StringConstraints(min_length=1, max_length=8192)]],
    Field(max_length=32),
]


def _identifier(v: str | None) -> str | None:
    if v is not None and not is_identifier(v):
        raise ValueError("must match [A-Za-z0-9_-]{1,128}")
    return v


class ClientToolSpec(Request):
    """An application tool the run may call; each call parks the run until
    POST /v1/runs/{run_id}/tool_results answers it."""

    name: str = Field(json_schema_extra={"pattern": TOOL_NAME.pattern})
    description: str = Field(default="", max_length=4096)
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not TOOL_NAME.match(v):
            raise ValueError("must match [A-Za-z0-9_-]{1,64}")
        return v

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type", "object") != "object":
            raise ValueError('must be a JSON schema of type "object"')
        return {"type": "object", **v}


ClientTools = Annotated[list[ClientToolSpec], Field(max_length=MAX_CLIENT_TOOLS)]
ClientToolTimeout = Annotated[float, Field(gt=0, le=MAX_CLIENT_TOOL_TIMEOUT_S)]


class ParentContext(Request):
    """loomcycle's parent_context (stored, echoed on run state, inherited by sub-agents)."""

    root_agent_run_id: str | None = Field(default=None, max_length=256)
    function_key: str | None = Field(default=None, max_length=256)
    tier_at_run: str | None = Field(default=None, max_length=256)
    board_scope: str | None = Field(default=None, max_length=256)
    board_chunk_id: str | None = Field(default=None, max_length=256)
    board_document_id: str | None = Field(default=None, max_length=256)

    def stored(self) -> dict[str, Any] | None:
        """All-empty is null, as in loomcycle."""
        d = {k: v for k, v in self.model_dump().items() if v}
        return d or None


class LoomcycleRunFields(Request):
    """The loomcycle fields of a run request. `session_id` continues a session (its earlier runs
    are the new run's history; 404 `session_not_found`, 409 `session_busy` while another run of
    it is live); `compaction` merges over the agent's compaction settings. `user_bearer` and
    `web_search_filter` are loomcycle's fields
    treadle does not have: refused with 400 `unsupported_field` (declared so the refusal can name
    them)."""

    tools: list[str] | None = Field(default=None, max_length=256)
    agent_id: str | None = Field(default=None, json_schema_extra={"pattern": IDENTIFIER_PATTERN})
    user_tier: str | None = Field(default=None, min_length=1, max_length=128)
    parent_context: ParentContext | None = None
    sampling: SamplingConfig | None = None
    run_timeout_seconds: int | None = Field(default=None, ge=1, le=30 * 86_400)
    tenant_id: str | None = Field(default=None, max_length=128)
    session_id: str | None = Field(default=None, json_schema_extra={"pattern": IDENTIFIER_PATTERN})
    user_bearer: Any = None
    #: over the agent's `compaction`, field by field (engine/compaction.py)
    compaction: CompactionConfig | None = None
    web_search_filter: Any = None

    _agent_id = field_validator("agent_id")(_identifier)
    _session_id = field_validator("session_id")(_identifier)


class RunRequest(LoomcycleRunFields):
    """Body of POST /v1/runs: `prompt` or `segments` is required."""

    #: the agent to run — or `team`: a TeamDef to walk (the run of agent `team:<name>`, docs/teams.md)
    agent: str = Field(default="", max_length=128)
    team: str | None = Field(default=None, min_length=1, max_length=128)
    prompt: str | None = None
    segments: list[Segment] | None = None
    user_id: str | None = Field(default=None, json_schema_extra={"pattern": IDENTIFIER_PATTERN})
    metadata: dict[str, Any] | None = None
    interactive: bool = False
    #: application tools the run may call; each call parks the run until POST .../tool_results
    client_tools: ClientTools | None = None
    client_tool_timeout_seconds: ClientToolTimeout | None = None
    #: narrows the hosts the run's tools (HTTP, WebFetch, …) may reach: ∩ the operator's and the
    #: agent's lists, never wider; sub-agent runs inherit it
    allowed_hosts: list[str] | None = Field(default=None, max_length=256)
    #: per-run credentials (name → value) for MCP server headers `${run.credentials.NAME}`; sealed
    #: at rest, never in events, logs or the model's view
    user_credentials: UserCredentials | None = None
    #: treadle's: the run outlives the SSE answer of POST /v1/runs — a client that leaves the
    #: stream does not cancel it (loomcycle's interactive runs are detached so; api/runstream.py).
    #: A JSON answer, a batch or an MCP spawn never ties a run to a connection.
    detach: bool = False

    _user_id = field_validator("user_id")(_identifier)

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            parse_host_patterns(v)  # ValueError names the bad entry
        return v

    @model_validator(mode="after")
    def _has_input(self) -> RunRequest:
        if not self.segments and not self.prompt:
            raise ValueError("either prompt or segments is required")
        if bool(self.agent) == bool(self.team):
            raise ValueError("exactly one of agent or team is required")
        if self.team:
            self.agent = "team:" + self.team  # a team run is a run of the agent team:<name>
        return self

    def to_segments(self) -> list[dict[str, Any]]:
        if self.segments:
            return [s.model_dump(exclude_none=True) for s in self.segments]
        return [{"role": "user", "content": [{"type": "trusted-text", "text": self.prompt or ""}]}]


class HistoryRequest(Request):
    """Body of POST /v1/_history: a History tool input (builtins/history.py)."""

    model_config = ConfigDict(extra="forbid", defer_build=True, populate_by_name=True)
    op: Literal["list", "get", "search", "rename", "annotate", "pin", "archive", "resume", "related", "recap"]
    scope: Literal["self", "user", "tenant", "global"] | None = None
    session_id: str | None = Field(default=None, max_length=128)
    query: str | None = Field(default=None, max_length=1024)
    title: str | None = Field(default=None, max_length=512)
    description: str | None = Field(default=None, max_length=4096)
    tags: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] | None = Field(
        default=None, max_length=32)
    tag: str | None = Field(default=None, max_length=64)
    title_contains: str | None = Field(default=None, max_length=512)
    pinned: bool | None = None
    archived: bool | None = None
    pinned_only: bool | None = None
    include_archived: bool | None = None
    from_: str | None = Field(default=None, alias="from", max_length=64)
    to: str | None = Field(default=None, max_length=64)
    format: Literal["json", "markdown"] | None = None
    limit: int | None = Field(default=None, ge=1, le=100)
    offset: int | None = Field(default=None, ge=0)


class HistoryAnswer(Response):
    """What a History op answers: `{chats, count}` (list, search, related), a chat (get: with
    `events` or `markdown`; rename, annotate, pin, archive), a continuation handle (resume) or
    `{scope, summary, chat}` (recap)."""

    chats: list[dict[str, Any]] | None = None
    count: int | None = None


class CompactRequest(Request):
    """Body of POST /v1/runs/{run_id}/compact (optional): loomcycle's client sends `reason`."""

    reason: str | None = Field(default=None, max_length=1024)


class CompactResult(Response):
    """loomcycle's CompactRunResult: `applied` live (a parked run), marker (an ended one) or noop."""

    run_id: str
    compacted: bool
    before_tokens: int
    after_tokens: int
    applied: Literal["live", "marker", "noop"]


class ReplayRequest(Request):
    """Body of POST /v1/sessions/{id}/replay (loomcycle's `replaySession`): the agent the new
    session continues with, and whether the carried history is compacted first."""

    agent: str = Field(min_length=1, max_length=128)
    compress: bool = False


class ReplayResult(Response):
    """loomcycle's ReplaySessionResult: the new session, the ended run that holds the carried
    conversation, how many events it holds, and whether a compaction marker follows them."""

    new_session_id: str
    seed_run_id: str
    events_copied: int
    compacted: bool


class SessionMessageRequest(LoomcycleRunFields):
    """Body of POST /v1/sessions/{id}/messages (loomcycle's continuation): the next user turn of
    the session; agent and user come from the session (`agent`, `user_id` are refused)."""

    prompt: str | None = None
    segments: list[Segment] | None = None
    metadata: dict[str, Any] | None = None
    interactive: bool = False
    client_tools: ClientTools | None = None
    client_tool_timeout_seconds: ClientToolTimeout | None = None
    allowed_hosts: list[str] | None = Field(default=None, max_length=256)
    user_credentials: UserCredentials | None = None

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            parse_host_patterns(v)
        return v

    @model_validator(mode="after")
    def _has_input(self) -> SessionMessageRequest:
        if not self.segments and not self.prompt:
            raise ValueError("either prompt or segments is required")
        if self.session_id is not None:
            raise ValueError("session_id: the session is the route's; omit session_id")
        return self

    def run_request(self, agent: str, user_id: str | None, session_id: str) -> RunRequest:
        """The POST /v1/runs body this continuation is."""
        fields = self.model_dump(exclude_unset=True, exclude={"session_id"})
        fields["segments"] = self.segments  # the validated models, as given
        return RunRequest.model_validate({**fields, "agent": agent, "user_id": user_id, "session_id": session_id})


class SessionView(Response):
    """A session: loomcycle's `{id, user_id, agent, created_at}` and its metadata."""

    id: str
    session_id: str
    agent: str
    user_id: str
    created_at: str
    updated_at: str
    title: str = ""
    description: str = ""
    tags: list[str] = Field(default_factory=list)
    pinned: bool = False
    archived: bool = False
    archived_at: str | None = None
    summary: str = ""
    summary_updated_at: str | None = None
    run_count: int = 0
    #: the session's runs in order (GET /v1/sessions/{id})
    runs: list[str] | None = None
    #: the session's unfinished run, if any
    live_run_id: str | None = None


class SessionList(Response):
    sessions: list[SessionView]
    next_cursor: str | None = None


class SessionPatch(Request):
    """Body of PATCH /v1/sessions/{id}: the metadata to change."""

    title: str | None = Field(default=None, max_length=512)
    description: str | None = Field(default=None, max_length=4096)
    tags: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] | None = Field(
        default=None, max_length=32)
    pinned: bool | None = None
    archived: bool | None = None


class CancelRequest(Request):
    """Body of POST /v1/runs/{run_id}/cancel (optional)."""

    reason: str | None = Field(default=None, max_length=1024)
    #: run: end the run (and its sub-agents); turn: stop the current turn of an interactive run and
    #: park it. Omitted: the turn, as loomcycle (409 `not_interactive` for a run that is not interactive)
    scope: Literal["run", "turn"] | None = None


class ToolResultRequest(Request):
    """Body of POST /v1/runs/{run_id}/tool_results: the answer to an application tool call."""

    tool_use_id: str = Field(min_length=1, max_length=256)
    content: str = Field(max_length=MAX_TOOL_RESULT_CHARS)
    is_error: bool = False


class InputRequest(Request):
    """Body of POST /v1/runs/{run_id}/input: the next user turn (must not be blank)."""

    text: str = Field(max_length=MAX_INPUT_CHARS, json_schema_extra={"pattern": r"\S"})


class AgentCancelRequest(Request):
    """Body of POST /v1/agents/{agent_id}/cancel (optional)."""

    reason: str | None = Field(default=None, max_length=1024)


class BatchRequest(Request):
    """Body of POST /v1/runs:batch: up to 32 spawns, each a POST /v1/runs body."""

    spawns: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_BATCH)
    #: loomcycle's only mode: the answer lists every spawn, index-aligned
    mode: Literal["join"] = "join"
    #: how long to wait for the runs to finish (0: answer once they are started)
    timeout_ms: int = Field(default=0, ge=0, le=600_000)


# -- responses -------------------------------------------------------------------------------------


class Usage(Response):
    input_tokens: int = 0
    output_tokens: int = 0


class Wait(Response):
    """What a parked run waits on."""

    kind: str
    key: str
    deadline: str | None = None
    tool_use_id: str | None = None


class Run(Response):
    """A run's state (GET /v1/runs/{run_id}). `error` is loomcycle's message, `error_detail`
    treadle's error object `{code, error, details?}`."""

    run_id: str
    agent: str
    user_id: str | None = None
    status: RunStatus
    stop_reason: str | None = None
    error: str | None = None
    error_detail: dict[str, Any] | None = None
    iterations: int = 0
    usage: Usage | None = None
    metadata: dict[str, Any] | None = None
    interactive: bool = False
    parent_run_id: str | None = None
    root_run_id: str | None = None
    depth: int = 0
    def_id: str | None = None
    def_content_sha256: str | None = None
    #: skill name → the SkillDef version the run pinned
    skill_def_ids: dict[str, str] | None = None
    last_seq: int = 0
    created_at: str
    updated_at: str
    completed_at: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    parent_context: dict[str, Any] | None = None
    #: parked runs in a list: what they wait on
    waits: list[Wait] | None = None


class RunCreated(Response):
    """202 of POST /v1/runs (without `Accept: text/event-stream`)."""

    run_id: str
    status: RunStatus
    #: false when an Idempotency-Key returned the run it started before
    created: bool
    agent_id: str
    session_id: str
    parent_context: dict[str, Any] | None = None


class RunList(Response):
    runs: list[Run]
    #: pass back as `cursor` for the next page; null on the last
    next_cursor: str | None = None


class Event(Response):
    """One transcript event: `seq`, `type`, `ts` and the event's own fields (by type; see
    docs/events.md)."""

    seq: int
    type: str
    ts: str | None = None


class RunEvents(Response):
    run_id: str
    status: RunStatus
    events: list[Event]


class RunCancelled(Response):
    """POST /v1/runs/{run_id}/cancel with scope `run`."""

    run_id: str
    status: RunStatus
    cancel_requested: bool


class TurnCancelled(Response):
    """POST /v1/runs/{run_id}/cancel with scope `turn` (an interactive run)."""

    run_id: str
    scope: Literal["turn"]
    stopped: bool
    parked: bool
    status: str


class ToolResultAccepted(Response):
    run_id: str
    tool_use_id: str
    accepted: bool
    #: how many parked steps the answer woke
    woke: int


class InputAccepted(Response):
    run_id: str
    delivered: bool
    input_id: int
    woke: bool


class SpawnResult(Response):
    """One spawn of a batch: the run's summary, or `{status: "failed", error, code}` when refused."""

    status: str
    agent_id: str | None = None
    run_id: str | None = None
    session_id: str | None = None
    stop_reason: str | None = None
    final_text: str | None = None
    usage: Usage | None = None
    error: str | None = None
    code: str | None = None
    parent_context: dict[str, Any] | None = None


class BatchResult(Response):
    results: list[SpawnResult]
    spawned: int


class AgentState(Run):
    """loomcycle's agent state (GET /v1/agents/{agent_id}): the run's state plus its names."""

    agent_id: str
    session_id: str
    parent_agent_id: str | None = None
    started_at: str
    live: bool
    last_heartbeat_at: str
    #: loomcycle's: a live resident sub-agent (Agent op=open) and its state (running | awaiting_input)
    resident: bool | None = None
    resident_state: str | None = None


class AgentList(Response):
    user_id: str
    agents: list[AgentState]


class AgentCancelled(Response):
    cancelled: bool
    agent_id: str
    run_id: str
    #: the agent ids of the sub-agent runs the cancel reached
    cascaded: list[str]
    status: RunStatus
    cancelled_count: int
    reason: str | None = None


class SessionInfo(Response):
    id: str
    user_id: str
    agent: str
    created_at: str
    title: str = ""
    run_count: int = 0


class TranscriptEvent(Response):
    seq: int
    run_id: str
    ts_ns: int
    type: str
    event: Event
    #: a `user_input`'s segments
    payload: Any = None


class Transcript(Response):
    session: SessionInfo
    events: list[TranscriptEvent]


class ForkRequest(Request):
    """POST /v1/runs/{run_id}/fork (issue 36): a new run whose history is this run's up to `at_seq`
    (moved back so no tool exchange is split). `prompt`: the next user turn after it; absent: the
    last user turn at or before `at_seq` is asked again. `agent` / `def_id` (an AgentDef version):
    what the fork runs (default: the run's agent, its active version). `mode`: `live` (the fork's
    tools run for real) or `replay` (the fork's calls are answered from the original's recorded
    results while they match — same tool, same canonical JSON input, in order — and run for real
    from the first that does not; such results carry `replayed`, the divergence is a
    `replay_diverged` event)."""

    at_seq: int
    prompt: str | None = None
    agent: str | None = Field(default=None, min_length=1, max_length=128)
    def_id: str | None = Field(default=None, min_length=1, max_length=128)
    mode: Literal["live", "replay"] = "live"


class ForkResult(Response):
    run_id: str
    status: RunStatus
    session_id: str
    forked_from: str
    #: where the fork's history ends in the original run (≤ the asked `at_seq`)
    at_seq: int
    #: events of the original's session carried into the fork's history
    events_copied: int
    agent: str
    def_id: str | None = None
    mode: Literal["live", "replay"] = "live"
