"""Steering a run from outside: `POST /v1/runs/{id}/input`, the turn cancel of interactive runs
(`POST /v1/runs/{id}/cancel` with `{"scope": "turn"}`), and what parked runs wait on.

The API never writes a run's transcript: it queues the input (store/inputs.py) and pokes the
run; the run's own step appends it under its lease (engine/waiting.py)."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any

from fastapi import APIRouter

from treadle.api.deps import Rt, Who
from treadle.api.errors import BODY, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.engine.waiting import input_key
from treadle.errors import (
    NotInteractive,
    NotMidTurn,
    QueueFull,
    RunFinished,
    RunNotFound,
    ValidationFailed,
)
from treadle.runtime import Runtime
from treadle.store.inputs import InputStore
from treadle.wire import CompactRequest, CompactResult, InputAccepted, InputRequest
from treadle.wire.runs import MAX_INPUT_CHARS

router = APIRouter(prefix="/v1", tags=["runs"], route_class=LazyAPIRoute)

__all__ = ["MAX_INPUT_CHARS", "InputRequest", "cancel_turn", "router"]


@router.post("/runs/{run_id}/compact", response_model=CompactResult, response_model_exclude_unset=True,
             responses=errors(*BODY, 404, 409, 429, 502))
async def compact(run_id: str, rt: Rt, who: Who, body: CompactRequest | None = None) -> dict[str, Any]:
    """loomcycle's manual compaction: summarize the run's history now (one model call) →
    `{run_id, compacted, before_tokens, after_tokens, applied}`. A run parked for input compacts
    at once (`live`: its next step records `context_compaction` and parks again); an ended run gets
    the marker its session's next turn replays (`marker`); fewer than 4 messages: `noop`. 409
    `run_busy` mid-turn, `agent_gone` when its agent no longer exists; 502 when the summary fails.
    `reason` (an audit note) is logged with the outcome."""
    return await rt.compact_run(who.tenant_id, run_id, body.reason if body is not None else None)


@router.post("/runs/{run_id}/input", response_model=InputAccepted, response_model_exclude_unset=True,
             responses=errors(*BODY, 404, 409, 429))
async def post_input(run_id: str, body: InputRequest, rt: Rt, who: Who) -> dict[str, Any]:
    """Steer a run: the text becomes the next user turn at the top of the run's next iteration
    (never between a tool_use and its tool_result), or wakes an interactive run parked for input.
    → `{run_id, delivered, input_id, woke}`; empty text 422, unknown run 404, finished run 409,
    more than 16 undelivered inputs 429."""
    if not body.text.strip():
        raise ValidationFailed("text: must not be empty")
    queued = await InputStore(rt.pool).add(who.tenant_id, run_id, "input", body.text)
    _check(run_id, queued.status, queued.input_id, queued.queue_full)
    woke = await rt.poke(who.tenant_id, [input_key(run_id)])
    return {"run_id": run_id, "delivered": True, "input_id": queued.input_id, "woke": woke > 0}


async def cancel_turn(rt: Runtime, tenant_id: str, run_id: str, reason: str | None) -> dict[str, Any]:
    """Stop the current turn of an interactive run at its next safe point: pending tool calls are
    answered with an error, its sub-agents and open questions are cancelled, and the run parks
    for input again. 409 `not_interactive`, `not_mid_turn` (it already waits for input) or
    `run_finished`; 404 unknown run."""
    run = await rt.runs.get(tenant_id, run_id)
    if run is None:
        raise RunNotFound(f"run {run_id!r} not found")
    if not run.interactive:
        raise NotInteractive(f"run {run_id} is not interactive; cancel the run instead (no scope)")
    store = InputStore(rt.pool)
    keys = await store.wait_keys(run_id)
    if run.status == "waiting" and keys == [input_key(run_id)]:
        raise NotMidTurn(f"run {run_id} is waiting for input; there is no turn to cancel")
    queued = await store.add(tenant_id, run_id, "turn_cancel", reason or "cancelled by operator")
    _check(run_id, queued.status, queued.input_id, queued.queue_full)
    # wake it wherever it is parked (a spurious wake of another run on a shared key is harmless) —
    # read again now that the cancel is stored: a step that parked since finds it (engine/waiting.py)
    keys = [*keys, *await store.wait_keys(run_id)]
    await rt.poke(tenant_id, sorted({*keys, input_key(run_id)}))
    return {"run_id": run_id, "scope": "turn", "stopped": True, "parked": True, "status": queued.status}


def _check(run_id: str, status: str | None, input_id: int | None, full: bool) -> None:
    if status is None:
        raise RunNotFound(f"run {run_id!r} not found")
    if input_id is None and full:
        raise QueueFull(f"run {run_id} has too many undelivered inputs; retry shortly")
    if input_id is None:
        raise RunFinished(f"run {run_id} is {status}")


async def waits_of(rt: Runtime, tenant_id: str, run_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    return await InputStore(rt.pool).waits_of(tenant_id, run_ids)


def encode_cursor(created_at: datetime, run_id: str) -> str:
    return base64.urlsafe_b64encode(f"{created_at.isoformat()}|{run_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, run_id = raw.partition("|")
        return datetime.fromisoformat(at), run_id
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValidationFailed("cursor: not a cursor this API returned") from None

