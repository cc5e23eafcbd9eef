"""The runtime's pause (loomcycle's `POST /v1/_pause {timeout_ms}`, `POST /v1/_resume`,
`GET /v1/_state`): the operator quiesces every run at an iteration boundary — before a backup, a
snapshot, a move between machines, a provider outage — and lets them go on. The operator only
(an admin of the default tenant): the pause is runtime-wide. See engine/pausing.py."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from treadle.api.admin import _operator
from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.wire import PauseRequest, PauseResult, ResumeResult, RuntimeState

router = APIRouter(prefix="/v1", tags=["operations"], route_class=LazyAPIRoute)


@router.post("/_pause", response_model=PauseResult, response_model_exclude_none=True, responses=errors(*BODY, 409))
async def pause_runtime(rt: Rt, who: Who, body: PauseRequest | None = None) -> dict[str, Any]:
    """Pause the runtime: new runs answer 503 `runtime_paused`, schedules and webhook-started runs
    wait, and every run parks at its next iteration boundary (never inside a tool call). Answers
    once every run parked, or at `timeout_ms` (default 30 s, at most 5 min). 409 `already_pausing`."""
    _operator(who)
    return await rt.pausing.pause((body or PauseRequest()).timeout_ms, budget_s=rt.sse_budget_s)


@router.post("/_resume", response_model=ResumeResult, response_model_exclude_none=True, responses=errors(*AUTHED, 409))
async def resume_runtime(rt: Rt, who: Who) -> dict[str, Any]:
    """Resume: every run the pause parked goes on where it was; new runs are accepted. 409 `not_paused`."""
    _operator(who)
    return await rt.pausing.resume()


@router.get("/_state", response_model=RuntimeState, responses=errors(*AUTHED))
async def runtime_state(rt: Rt, who: Who) -> dict[str, Any]:
    """running | pausing | paused, with the runs a pause parked and those not parked yet."""
    _operator(who)
    return await rt.pausing.state()
