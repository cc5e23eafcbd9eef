"""/v1/runs: start, read, stream and cancel runs."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from treadle.api.clienttools import ClientTools, ClientToolTimeout, client_tool_specs
from treadle.api.deps import get_principal, get_runtime
from treadle.api.sse import SSE_HEADERS, stream_run_events
from treadle.api.steering import cancel_turn, decode_cursor, encode_cursor, waits_of
from treadle.domain.ids import is_identifier
from treadle.domain.runs import RunStatus
from treadle.domain.segments import Segment
from treadle.errors import RunNotFound, ValidationFailed
from treadle.mcp.credentials import UserCredentials, seal_credentials
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.specs.hosts import parse_host_patterns
from treadle.store.runs import NewRun

router = APIRouter(prefix="/v1", tags=["runs"])



class RunRequest(BaseModel):
    """Body of POST /v1/runs (loomcycle's shape; the fields treadle does not have yet are refused)."""

    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1, max_length=128)
    prompt: str | None = None
    segments: list[Segment] | None = None
    user_id: str | None = None
    metadata: dict[str, Any] | None = None
    interactive: bool = False
    #: application tools the run may call; each call parks the run until POST .../tool_results
    client_tools: ClientTools | None = None
    client_tool_timeout_seconds: ClientToolTimeout | None = None
    #: narrows the hosts the run's tools (HTTP, WebFetch, …) may reach: ∩ the operator's and the
    #: agent's lists, never wider; sub-agent runs inherit it
    allowed_hosts: list[str] | None = Field(default=None, max_length=256)
    #: per-run credentials (name → value) for MCP server headers `${run.credentials.NAME}`; sealed
    #: at rest, never in events, logs or the model's view (treadle/mcp/credentials.py)
    user_credentials: UserCredentials | None = None

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            parse_host_patterns(v)  # ValueError names the bad entry
        return v

    @field_validator("user_id")
    @classmethod
    def _ident(cls, v: str | None) -> str | None:
        if v is not None and not is_identifier(v):
            raise ValueError("must match [A-Za-z0-9_-]{1,128}")
        return v

    @model_validator(mode="after")
    def _has_input(self) -> RunRequest:
        if not self.segments and not self.prompt:
            raise ValueError("either prompt or segments is required")
        return self

    def to_segments(self) -> list[dict[str, Any]]:
        if self.segments:
            return [s.model_dump(exclude_none=True) for s in self.segments]
        return [{"role": "user", "content": [{"type": "trusted-text", "text": self.prompt or ""}]}]


class CancelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(default=None, max_length=1024)
    #: run: end the run (and its sub-agents); turn: stop the current turn of an interactive run and park it
    scope: Literal["run", "turn"] = "run"


Rt = Annotated[Runtime, Depends(get_runtime)]
Who = Annotated[Principal, Depends(get_principal)]


def _wants_sse(request: Request) -> bool:
    return "text/event-stream" in request.headers.get("accept", "")


def _sse_response(rt: Runtime, tenant: str, run_id: str, from_seq: int) -> StreamingResponse:
    body = stream_run_events(
        rt.runs, rt.hub, tenant, run_id, from_seq, keepalive_s=rt.settings.sse_keepalive_seconds,
        budget_s=rt.sse_budget_s,
    )
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


@router.post("/runs", status_code=202, response_model=None)
async def create_run(
    body: RunRequest,
    request: Request,
    rt: Rt,
    who: Who,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
) -> JSONResponse | StreamingResponse:
    """Start a run. With `Accept: text/event-stream` the response streams the run's events until
    it ends; otherwise `202 {"run_id", "status"}`. An `Idempotency-Key` header makes retries safe:
    the same key returns the run it started the first time."""
    run, created = await rt.start_run(
        NewRun(
            tenant_id=who.tenant_id,
            agent=body.agent,
            segments=body.to_segments(),
            user_id=body.user_id,
            metadata=body.metadata,
            interactive=body.interactive,
            idempotency_key=idempotency_key,
            client_tools=client_tool_specs(rt, body.client_tools, body.client_tool_timeout_seconds),
            client_tool_timeout_s=body.client_tool_timeout_seconds,
            allowed_hosts=body.allowed_hosts,
            sealed_credentials=seal_credentials(who.tenant_id, body.user_credentials),
        )
    )
    if _wants_sse(request):
        return _sse_response(rt, who.tenant_id, run.id, 0)
    return JSONResponse({"run_id": run.id, "status": run.status, "created": created}, status_code=202)


@router.get("/runs")
async def list_runs(
    rt: Rt,
    who: Who,
    status: Annotated[RunStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    user_id: Annotated[str | None, Query(max_length=128)] = None,
    agent: Annotated[str | None, Query(max_length=128)] = None,
) -> dict[str, Any]:
    """The tenant's runs, newest first, `limit` per page; pass `next_cursor` back as `cursor` for the
    next page; `user_id` / `agent` narrow the list. Parked runs (`status=waiting`) carry `waits`:
    [{kind, key, deadline, tool_use_id}]."""
    runs = await rt.runs.list_runs(who.tenant_id, status.value if status else None, limit, decode_cursor(cursor),
                                   user_id=user_id, agent=agent)
    out = [r.to_api() for r in runs]
    waits = await waits_of(rt, who.tenant_id, [r.id for r in runs if r.status == RunStatus.WAITING.value])
    for item in out:
        if item["run_id"] in waits:
            item["waits"] = waits[item["run_id"]]
    next_cursor = encode_cursor(runs[-1].created_at, runs[-1].id) if len(runs) == limit else None
    return {"runs": out, "next_cursor": next_cursor}


@router.get("/runs/{run_id}")
async def get_run(run_id: str, rt: Rt, who: Who) -> dict[str, Any]:
    run = await rt.runs.get(who.tenant_id, run_id)
    if run is None:
        raise RunNotFound(f"run {run_id!r} not found")
    return run.to_api()


@router.get("/runs/{run_id}/events")
async def get_events(
    run_id: str,
    rt: Rt,
    who: Who,
    from_seq: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
) -> dict[str, Any]:
    run = await rt.runs.get(who.tenant_id, run_id)
    if run is None:
        raise RunNotFound(f"run {run_id!r} not found")
    events = await rt.runs.events(who.tenant_id, run_id, from_seq, limit)
    return {"run_id": run_id, "status": run.status, "events": [e.to_api() for e in events]}


@router.get("/runs/{run_id}/stream", response_model=None)
async def stream(
    run_id: str,
    rt: Rt,
    who: Who,
    from_seq: Annotated[int, Query(ge=0)] = 0,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """SSE of the run's events after `from_seq` (or after the `Last-Event-ID` header)."""
    if last_event_id is not None:
        if not (last_event_id.strip().isascii() and last_event_id.strip().isdigit()):  # "²".isdigit() too
            raise ValidationFailed("Last-Event-ID must be an event seq (a non-negative integer)")
        from_seq = max(from_seq, int(last_event_id))
    run = await rt.runs.get(who.tenant_id, run_id)
    if run is None:
        raise RunNotFound(f"run {run_id!r} not found")
    return _sse_response(rt, who.tenant_id, run_id, from_seq)


@router.post("/runs/{run_id}/cancel")
async def cancel_run(run_id: str, rt: Rt, who: Who, body: CancelRequest | None = None) -> dict[str, Any]:
    """Cancel the run at its next safe point (never between a tool_use and its tool_result), with
    its unfinished sub-agent runs. Cancelling a finished run is a no-op that reports its status.
    `{"scope": "turn"}` cancels only the current turn of an interactive run (api/steering.py)."""
    if body is not None and body.scope == "turn":
        return await cancel_turn(rt, who.tenant_id, run_id, body.reason)
    reason = (body.reason if body else None) or "cancelled by api"
    run = await rt.cancel_run(who.tenant_id, run_id, reason)
    if run is None:
        raise RunNotFound(f"run {run_id!r} not found")
    return {"run_id": run.id, "status": run.status, "cancel_requested": not run.terminal or run.status == "cancelled"}
