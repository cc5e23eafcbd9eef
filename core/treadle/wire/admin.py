"""Who the caller is, the operator's cross-tenant routes, health."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from treadle.wire._base import Request, Response


class Capabilities(Response):
    mcp_allow_dynamic_stdio: bool
    http_host_allowlist_configured: bool


class Whoami(Response):
    """GET /v1/_whoami and loomcycle's GET /v1/_me."""

    tenant_id: str
    subject: str
    scopes: list[str]
    is_admin: bool
    open_mode: bool
    legacy: bool
    token_id: str | None = None
    capabilities: Capabilities


class AdminRun(Response):
    run_id: str
    tenant_id: str
    user_id: str | None = None
    agent: str
    status: str
    parent_run_id: str | None = None
    created_at: str


class AdminRuns(Response):
    runs: list[AdminRun]
    count: int


class CancelTenantRequest(Request):
    """Body of POST /v1/_admin/tenants/{tenant_id}/cancel (optional)."""

    reason: str = Field(default="cancelled by the operator", max_length=500)


class TenantCancelled(Response):
    tenant_id: str
    cancel_requested: int
    run_ids: list[str]
    #: true when the call hit its limit: call again for the rest
    more: bool


class TenantErased(Response):
    tenant_id: str
    #: rows deleted per table
    deleted: dict[str, int]


class ConcurrencyCaps(Response):
    tenant_max_running: int
    user_max_running: int


class Concurrency(Response):
    """GET /v1/_concurrency: the caller's tenant's runs holding a worker, queued, parked; per user;
    and the caps (0 = none)."""

    tenant_id: str
    caps: ConcurrencyCaps


class Health(Response):
    ok: bool
    version: str


# -- introspection (loomcycle's models_admin.go, routing.go, runnable_agents.go) ----------------------


class ModelAlias(Response):
    provider: str
    model: str


class ModelAliases(Response):
    """GET /v1/_models."""

    aliases: dict[str, ModelAlias]


class RoutingCandidate(Response):
    provider: str
    model: str
    primary: bool
    available: bool
    selected: bool
    reachable: bool


class RoutingTier(Response):
    tier: str
    cascade: list[RoutingCandidate]


class RoutingUserTier(Response):
    name: str
    tiers: list[RoutingTier]


class RoutingProvider(Response):
    provider: str
    reachable: bool
    excluded: bool


class RoutingView(Response):
    """GET /v1/_routing."""

    generated_at: str
    admin: bool
    providers: list[RoutingProvider]
    user_tiers: list[RoutingUserTier]


class RunnableAgent(Response):
    name: str
    source: str = Field(description="bundled (treadle.yaml) or tenant (an active AgentDef)")


class RunnableAgents(Response):
    """GET /v1/_runnable-agents."""

    agents: list[RunnableAgent]


class ResolverModel(Response):
    listed: bool = Field(description="in the vendor's model list (before any probe: configured)")
    stalled: bool = Field(description="this process's last call to it failed with a retryable error")


class ResolverProvider(Response):
    excluded: bool = Field(description="its key variable is not set: never probed")
    reachable: bool
    models: dict[str, ResolverModel]
    last_check: str | None
    last_error: str | None = None


class ResolverMatrix(Response):
    """GET /v1/_resolver, POST /v1/_resolve/probe (loomcycle's resolver matrix)."""

    generated_at: str
    providers: dict[str, ResolverProvider]


class ProviderModels(Response):
    """GET /v1/_providers/{provider_id}/models: the vendor's list, fetched now."""

    provider: str
    fetched_at: str
    duration_ms: int
    models: list[str]


class ConfigInstance(Response):
    version: str | None = None
    url: str | None = None


class ConfigProvider(Response):
    provider: str
    active: bool


class ConfigModel(Response):
    provider: str
    model: str
    tiers: list[str]
    active: bool
    selected: bool


class ConfigSearch(Response):
    provider: str
    active: bool
    primary: bool


class ConfigView(Response):
    """GET /v1/config (loomcycle's): what this instance is and can do, at the caller's disclosure level."""

    generated_at: str
    view: str = Field(description="public | authenticated | admin")
    instance: ConfigInstance
    features: dict[str, Any]
    providers: list[ConfigProvider]
    models: list[ConfigModel]
    search: list[ConfigSearch]
    user_tiers: list[str] | None = None
    limits: dict[str, Any] | None = None


class Readiness(Response):
    """GET /readyz."""

    ok: bool
    version: str
    database: str = Field(description="ok | unreachable | not_open")
    pending_migrations: list[int] = Field(description="versions this treadle ships that the database lacks")
class PauseRequest(Request):
    """POST /v1/_pause (loomcycle's): how long to wait for every run to reach an iteration boundary;
    0 or absent: 30 s; at most 5 minutes."""

    timeout_ms: int = Field(default=0, ge=0)


class PauseResult(Response):
    state: str
    duration_ms: int
    force_cancelled_count: int
    paused_runs_count: int
    warnings: list[str] | None = None


class ResumeResult(Response):
    state: str
    resumed_runs_count: int
    warnings: list[str] | None = None


class RuntimeState(Response):
    """GET /v1/_state: running | pausing | paused, the runs a pause parked, and (treadle's) the runs
    not parked yet."""

    state: str
    paused_runs_count: int
    active_runs_count: int


# -- snapshots (loomcycle's /v1/_snapshots; treadle/portable/snapshots.py) ----------------------------


class SnapshotCreate(Request):
    """POST /v1/_snapshots: a label; with `include_history` the ended runs too (created at
    `include_history_since` or later, RFC 3339) — without it, the runs not ended and the runs their
    sessions and trees hold; `max_bytes` 0: 512 MiB."""

    label: str | None = Field(default=None, max_length=500)
    include_history: bool = False
    include_history_since: str | None = None
    max_bytes: int = Field(default=0, ge=0)


class SnapshotMeta(Response):
    id: str
    created_at: str
    label: str | None = None
    schema_version: int
    byte_size: int
    #: the tenant of a tenant admin's snapshot; absent: the operator's, of the whole runtime
    tenant_id: str | None = None


class SnapshotList(Response):
    entries: list[SnapshotMeta]


class SnapshotFull(SnapshotMeta):
    """GET /v1/_snapshots/{id}: the metadata and the document."""

    json_content: dict[str, Any]


class SnapshotRestore(Request):
    """POST /v1/_snapshots/{id}/restore: `json` (an exported document) instead of the stored one;
    `include_history` also restores the ended runs no live run needs."""

    include_history: bool = False
    json_doc: dict[str, Any] | None = Field(default=None, alias="json")


class SnapshotRestored(Response):
    """loomcycle's restore counters (rows written: a row whose key existed is not counted) and
    `restored`, every section's."""

    agent_defs_restored: int
    agent_def_active_restored: int
    memory_restored: int
    channel_messages_restored: int
    channel_cursors_restored: int
    evaluations_restored: int
    paused_runs_restored: int
    paused_runs_resumed: int
    synthesized_sessions: int
    transcript_events_restored: int
    interaction_history_restored: int
    restored: dict[str, int]
    warnings: list[str] | None = None
    #: treadle's: restored schedules given their external scheduler's schedule at once (the cloud's
    #: EventBridge Scheduler; absent where schedules fire in-process)
    schedules_synced: int | None = None


# -- resident sub-agents (loomcycle's /v1/_resident; builtins/resident.py) ---------------------------


class ResidentInfo(Response):
    """loomcycle's residentInfo: one resident sub-agent (Agent op=open) — `state` running |
    awaiting_input | completed | failed | cancelled | closed; treadle adds the parent's run id,
    when it was opened and (closed ones) when and why it closed."""

    child_run_id: str
    agent_id: str
    agent: str | None = None
    parent_agent_id: str | None = None
    parent_run_id: str | None = None
    tenant_id: str | None = None
    state: str
    idle_ttl_seconds: int
    last_used_at: str
    created_at: str | None = None
    closed_at: str | None = None
    close_reason: str | None = None


class ResidentList(Response):
    """GET /v1/_resident: the caller's open resident sub-agents (an operator: every tenant's)."""

    resident: list[ResidentInfo]


class ResidentClosed(Response):
    run_id: str
    closed: bool


class ResidentCancelled(Response):
    """POST /v1/_resident/{run_id}/cancel: `stopped` false when the child was not mid-turn."""

    run_id: str
    stopped: bool
