"""Definitions (AgentDef, SkillDef, VolumeDef, ScheduleDef, WebhookDef, MCPServerDef,
OperatorTokenDef) and evaluations over HTTP: one op input in, the op's JSON answer out; and the
schedule and webhook admin routes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from treadle.wire._base import Request, Response

#: the ops every kind of definition has (a kind may add its own, e.g. OperatorTokenDef's rotate)
DEF_OPS = ("create", "fork", "get", "list", "retire", "promote", "verify")
EVALUATION_OPS = ("submit", "get", "list_for_run", "list_for_def", "aggregate")


class DefOp(Request):
    """Body of POST /v1/_<kind>def: the op and its input (the same JSON the *Def tool takes).
    The kind's own fields (e.g. a SkillDef's `body`, an OperatorTokenDef's `grace_seconds`) are
    passed through; the kind refuses (422 `tool_refused`) any it does not know."""

    model_config = ConfigDict(extra="allow")
    op: str = Field(description="create | fork | get | list | retire | promote | verify (| rotate: tokens)")
    name: str | None = None
    def_id: str | None = None
    version: int | None = Field(default=None, ge=1)
    overlay: dict[str, Any] | None = Field(default=None, description="the def's fields; null removes a field (fork)")
    description: str | None = None
    promote: bool | None = Field(default=None, description="make it the version new runs get")
    include_lineage: bool | None = None
    include_retired: bool | None = Field(default=None, description="list: include retired versions")
    retired: bool | None = Field(default=None, description="list: include retired versions (loomcycle's name)")
    content_sha256: str | None = Field(default=None, description="verify: the hash computed locally")
    #: OperatorTokenDef: the operator may act for another tenant
    tenant_id: str | None = None


class EvaluationOp(Request):
    """Body of POST /v1/_evaluation."""

    op: Literal["submit", "get", "list_for_run", "list_for_def", "aggregate"]
    run_id: str | None = None
    eval_id: str | None = None
    def_id: str | None = None
    name: str | None = Field(default=None, description="an agent name (list_for_def, aggregate)")
    score: float | None = None
    dimensions: dict[str, float] | None = None
    #: free-form JSON (loomcycle's), at most 32 KiB
    judgement: Any = None
    rationale: str | None = None
    include_lineage: bool | None = None
    limit: int | None = Field(default=None, ge=1, le=1000)


class OpResult(Response):
    """The op's answer: the def's view (`def_id`, `name`, `version`, `status`, `body`, …), a list
    of them, or an evaluation result, by op."""


class DefView(Response):
    """One def as create, fork, get, promote and retire answer it (a kind may add fields:
    AgentDef's scores, OperatorTokenDef's `token` on create/rotate, WebhookDef's `url_path`)."""

    def_id: str | None = Field(description="null for a treadle.yaml def (`source: yaml`)")
    kind: str
    name: str
    version: int | None = None
    content_sha256: str | None = None
    treadle_sha256: str | None = None
    body: dict[str, Any] | None = None
    parent_def_id: str | None = None
    status: str
    active: bool
    description: str | None = None
    created_by_run_id: str | None = None
    created_at: str | None = None
    retired_at: str | None = None
    #: runtime (a stored version) or yaml (treadle.yaml)
    source: str


class DefList(Response):
    """What op `list` answers: the stored versions, and the treadle.yaml defs of that kind."""

    defs: list[DefView]
    count: int
    static: list[DefView] = []


class Names(Response):
    """The names new runs (or deliveries) can use: treadle.yaml's and the promoted defs'."""

    names: list[str]


# -- schedules and webhooks ------------------------------------------------------------------------


class ScheduleState(Response):
    schedule_id: str
    name: str
    def_id: str | None = None
    version: int | None = None
    status: str
    paused: bool
    next_fire_at: str | None = None
    fire_count: int | None = None
    total_fires: int | None = None
    skipped_fires: int | None = None
    last_fire_at: str | None = None
    last_run_id: str | None = None
    last_status: str | None = None
    last_error: str | None = None
    retired_reason: str | None = None
    synced_state: str | None = None
    sync_error: str | None = None
    updated_at: str | None = None


class ScheduleDetail(ScheduleState):
    """GET /v1/_schedules/{ident}/state: the state, the def's timing and the recent fires."""

    schedule: Any = None
    timezone: str | None = None
    enabled: bool | None = None
    max_fires: int | None = None
    catch_up_max: int | None = None
    recent_fires: list[dict[str, Any]] = []


class ScheduleList(Response):
    schedules: list[ScheduleState]


class ScheduleFired(Response):
    """POST /v1/_schedules/{ident}/run-now."""

    schedule_id: str
    run_id: str | None = None
    scheduled_for: str | None = None


class WebhookDeliveries(Response):
    webhook_name: str
    deliveries: list[dict[str, Any]]


class WebhookDryRun(Response):
    """POST /v1/_webhooks/{name}/test: what a delivery would do (signature, mapping, target),
    without a run."""

    webhook_name: str
    ok: bool | None = None
    code: str | None = None
    error: str | None = None


class WebhookAccepted(Response):
    """A delivery's answer: 202 with the run it started or the message it published; 200 with
    `duplicate: true` for a delivery id seen before."""

    webhook_name: str
    delivery_id: str
    run_id: str | None = None
    channel: str | None = None
    duplicate: bool | None = None
