"""Governance (issue 42): budgets (`/v1/_limits`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from treadle.wire._base import Request, Response


class LimitRequest(Request):
    """Body of PUT /v1/_limits — one budget, upserted (loomcycle's fields, plus treadle's agent
    scope, `window`, `metric` and `currency`). A tenant's caller writes its own tenant's only."""

    tenant_id: str | None = Field(default=None, max_length=64)
    scope: Literal["tenant", "user", "agent"]
    scope_id: str = Field(default="", max_length=256)
    soft_limit: float | None = Field(default=None, ge=0)
    hard_limit: float | None = Field(default=None, ge=0)
    window: Literal["month", "day"] = "month"
    metric: Literal["tokens", "cost"] = "tokens"
    currency: str = Field(default="USD", min_length=1, max_length=8)


class LimitRow(Response):
    """One budget with the usage its window has counted so far."""

    tenant_id: str
    scope: str
    scope_id: str = ""
    soft_limit: float | None = None
    hard_limit: float | None = None
    window: str
    metric: str
    currency: str | None = None
    used: float
    updated_at: str | None = None
    updated_by: str | None = None


class LimitList(Response):
    limits: list[LimitRow]


class CredentialOp(Request):
    """Body of POST /v1/_credentialdef (loomcycle's CredentialDef ops). `create` stores or replaces
    a value (sealed; never answered back); `get`/`list` answer metadata only; `delete`; `rotate`
    re-seals the tenant's rows under the current deployment key."""

    op: Literal["create", "get", "list", "delete", "rotate"]
    scope: Literal["tenant", "user", "agent"] | None = None
    #: tenant: none; user: the user id (default: the caller's subject); agent: the agent name
    scope_id: str | None = Field(default=None, max_length=256)
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    value: str | None = Field(default=None, min_length=1, max_length=16384)


class CredentialMeta(Response):
    tenant_id: str
    scope: str
    scope_id: str = ""
    name: str
    created_at: str
    updated_at: str
    updated_by: str = ""


class CredentialResult(Response):
    op: str
    credential: CredentialMeta | None = None
    credentials: list[CredentialMeta] | None = None
    deleted: bool | None = None
    rotated: int | None = None


class RetentionPolicy(Response):
    """Days per class (null: kept forever)."""

    runs: int | None = None
    channel_messages: int | None = None
    memory: int | None = None
    responses: int | None = None


class RetentionReport(Response):
    """GET /v1/_retention: the tenant's effective policy, what it would delete now, and (the
    operator's view) the default and every tenant's override."""

    tenant_id: str
    policy: RetentionPolicy
    purgeable: dict[str, int]
    batch: int
    default: RetentionPolicy | None = None
    tenants: dict[str, RetentionPolicy] | None = None


class ErasureRequest(Request):
    """Body of POST /v1/_erasure (loomcycle's): `subject` (a user id); `dry_run` defaults to true
    (count, change nothing); a real erasure repeats the subject as `confirm`."""

    subject: str = Field(min_length=1, max_length=256)
    dry_run: bool = True
    confirm: str | None = Field(default=None, max_length=256)


class ErasureReceipt(Response):
    tenant: str
    subject: str
    dry_run: bool
    #: rows removed per table (events: those that went with the runs)
    deleted: dict[str, int]
    #: rows kept with the subject taken out (usage folded into the tenant's user-less rows)
    anonymized: dict[str, int]
    #: the volume files removed (to be removed, on a dry run), as `<location>/<path>` (host
    #: directory or S3 key under the volumes root): what its runs wrote, its runs' ephemeral
    #: volumes, its rows in the retention archive
    files: list[str] = []
    notes: list[str]
