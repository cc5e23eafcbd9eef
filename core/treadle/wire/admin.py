"""Who the caller is, the operator's cross-tenant routes, health."""

from __future__ import annotations

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
