"""Runs seen as MCP Tasks (2025-11-25 `tasks/*` and 2026-07-28's `io.modelcontextprotocol/tasks`).

A task is a run: nothing about a task is stored apart from its runs, so its state is read from the
run rows every time (a client polling `tasks/get` across a kill -9 of the server, or from another
Lambda, gets the same answer). The task id names what the task follows:

    r_…                         spawn_run: one run
    spawns:r_…,r_…  /  runs:…   spawn_runs: its runs, answered in loomcycle's / treadle's envelope
    send:r_…:N                  steer_run / send_input to a resident: its turn after input N

    run / runs                    task status
    queued, running, waiting      working
    waiting on an Interruption    input_required (the question is the status message; 2026: an
      or for input                  elicitation in inputRequests, answered by tasks/update)
    completed                     completed (the tool's answer is the task's result)
    failed                        2025-11-25: failed; 2026-07-28: completed with an isError result
                                  (the extension keeps `failed` for JSON-RPC errors)
    cancelled                     cancelled

A `send` task is completed when the resident consumed input N and parks for input again. Every
lookup is the caller's tenant's: a task of another tenant is `task_not_found`, like a run."""

from __future__ import annotations

import re
import time
from contextlib import suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from treadle.api.mcp.join import final_text, outcome
from treadle.domain.runs import RunStatus
from treadle.engine.plan import input_key
from treadle.errors import NotFound, ValidationFailed
from treadle.runtime import Runtime
from treadle.store.inputs import InputStore
from treadle.store.interrupts import Interrupt, InterruptStore, interrupt_key
from treadle.store.runs import RunRecord

TASKS_EXT = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
#: the polling interval suggested to clients
POLL_MS = 1000
#: the tools that may answer as a task (2025-11-25 `execution.taskSupport: optional`)
TASK_TOOLS = frozenset({"spawn_run", "spawn_runs", "steer_run", "send_input"})

Kind = Literal["run", "spawns", "runs", "send"]
Status = Literal["working", "input_required", "completed", "failed", "cancelled"]
_RUN_ID = re.compile(r"r_[0-9a-f]{32}")


#: how the current tools/call may answer: "now" (2025-11-25 `task` param: a task at once), "late"
#: (2026-07-28 extension: a task if the work is not done at the tool's timeout), None (never)
TASK_MODE: ContextVar[Literal["now", "late"] | None] = ContextVar("treadle_mcp_task_mode", default=None)
#: the client answers elicitations (2026-07-28: an InputRequiredResult when a run asks a question)
ELICIT: ContextVar[bool] = ContextVar("treadle_mcp_elicit", default=False)


def follow_mode() -> bool:
    """A long tool stops waiting when its runs park on a question (someone can answer it now)."""
    return TASK_MODE.get() is not None or ELICIT.get()


class TaskNotFound(NotFound):
    code = "task_not_found"


@dataclass(frozen=True, slots=True)
class TaskRef:
    kind: Kind
    run_ids: tuple[str, ...]
    input_id: int = 0

    @property
    def id(self) -> str:
        if self.kind == "run":
            return self.run_ids[0]
        if self.kind == "send":
            return f"send:{self.run_ids[0]}:{self.input_id}"
        return f"{self.kind}:{','.join(self.run_ids)}"

    @classmethod
    def parse(cls, task_id: str) -> TaskRef:
        kind, _, rest = task_id.partition(":")
        try:
            if not rest and _RUN_ID.fullmatch(kind):
                return cls("run", (kind,))
            if kind == "send":
                run_id, _, n = rest.partition(":")
                if _RUN_ID.fullmatch(run_id) and n.isdigit():
                    return cls("send", (run_id,), int(n))
            if kind in ("spawns", "runs"):
                ids = tuple(rest.split(","))
                if ids and all(_RUN_ID.fullmatch(i) for i in ids):
                    return cls(kind, ids)  # type: ignore[arg-type]
        except ValueError:
            pass
        raise TaskNotFound(f"task {task_id[:200]!r} not found")


class AnswerAsTask(Exception):
    """Raised by a long tool that has started its work and answers with a task handle."""

    def __init__(self, ref: TaskRef, fallback: dict[str, Any] | None = None) -> None:
        super().__init__(ref.id)
        self.ref = ref
        #: the tool's ordinary answer, for when the caller can take neither a task nor a question
        self.fallback = fallback


@dataclass(slots=True)
class TaskView:
    ref: TaskRef
    status: Status
    runs: list[RunRecord]
    message: str | None = None
    #: the open questions of an input_required task (an empty list: the run waits for input)
    pending: list[Interrupt] = field(default_factory=list)

    @property
    def terminal(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")

    @property
    def failed(self) -> bool:
        return any(r.status == RunStatus.FAILED.value for r in self.runs)


async def _runs(rt: Runtime, tenant_id: str, ref: TaskRef) -> list[RunRecord]:
    found = [await rt.runs.get(tenant_id, run_id) for run_id in ref.run_ids]
    if any(r is None for r in found):
        raise TaskNotFound(f"task {ref.id[:200]!r} not found")
    return [r for r in found if r is not None]


async def _asks(rt: Runtime, run: RunRecord) -> tuple[list[Interrupt], bool]:
    """A waiting run's open questions, and whether it waits for its next input."""
    if run.status != RunStatus.WAITING.value:
        return [], False
    pending = [i for i in await InterruptStore(rt.pool).list_for_run(run.tenant_id, run.id, "pending")
               if not i.expired]
    keys = await InputStore(rt.pool).wait_keys(run.id)
    return pending, input_key(run.id) in keys


async def view(rt: Runtime, tenant_id: str, ref: TaskRef) -> TaskView:
    runs = await _runs(rt, tenant_id, ref)
    pending: list[Interrupt] = []
    wants_input = False
    for run in runs:
        asks, waits = await _asks(rt, run)
        pending += asks
        wants_input = wants_input or waits
    if ref.kind == "send":
        run = runs[0]
        if not run.terminal and not pending:
            done = wants_input and await InputStore(rt.pool).latest(run.id) >= ref.input_id
            return TaskView(ref, "completed" if done else "working", runs,
                            "the turn is answered" if done else None)
    if all(r.terminal for r in runs):
        if all(r.status == RunStatus.CANCELLED.value for r in runs):
            return TaskView(ref, "cancelled", runs, "cancelled")
        if len(runs) == 1 and runs[0].status == RunStatus.FAILED.value:
            return TaskView(ref, "failed", runs, str((runs[0].error or {}).get("error") or "the run failed"))
        return TaskView(ref, "completed", runs)
    if pending:
        return TaskView(ref, "input_required", runs, pending[0].question, pending)
    if wants_input and ref.kind != "send":
        return TaskView(ref, "input_required", runs, "the run waits for its next message")
    return TaskView(ref, "working", runs)


async def follow(rt: Runtime, tenant_id: str, ref: TaskRef, deadline: float) -> TaskView:
    """The task once its runs are done or ask a question someone can answer (a run parked on a
    child or a timer is still working: keep waiting), or at `deadline` (monotonic)."""
    from treadle.api.mcp.join import settle

    while True:
        await settle(rt, tenant_id, list(ref.run_ids), deadline, stop_on_wait=True)
        v = await view(rt, tenant_id, ref)
        left = deadline - time.monotonic()
        if v.terminal or v.status == "input_required" or left <= 0:
            return v
        await rt.hub.wait(ref.run_ids[0], min(0.25, left))


def _iso(t: datetime) -> str:
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC).isoformat().replace("+00:00", "Z")


def _times(v: TaskView) -> tuple[str, str]:
    return _iso(min(r.created_at for r in v.runs)), _iso(max(r.updated_at for r in v.runs))


def legacy_task(v: TaskView) -> dict[str, Any]:
    """The 2025-11-25 `Task` (a run is kept as long as retention keeps it: ttl null)."""
    created, updated = _times(v)
    out: dict[str, Any] = {"taskId": v.ref.id, "status": v.status, "createdAt": created, "lastUpdatedAt": updated,
                           "ttl": None, "pollInterval": POLL_MS}
    if v.message:
        out["statusMessage"] = v.message[:1000]
    return out


def modern_task(v: TaskView) -> dict[str, Any]:
    """The 2026-07-28 extension's `Task` (ttlMs, pollIntervalMs); `failed` is never a run's outcome."""
    created, updated = _times(v)
    status = "completed" if v.status == "failed" else v.status
    out: dict[str, Any] = {"taskId": v.ref.id, "status": status, "createdAt": created, "lastUpdatedAt": updated,
                           "ttlMs": None, "pollIntervalMs": POLL_MS}
    if v.message:
        out["statusMessage"] = v.message[:1000]
    return out


async def answer(rt: Runtime, tenant_id: str, v: TaskView) -> dict[str, Any]:
    """What the tool that made the task answers once it is done (its structured content)."""
    ref = v.ref
    if ref.kind == "run":
        return {**await outcome(rt, tenant_id, v.runs[0]), "created": True}
    if ref.kind == "send":
        run = v.runs[0]
        return {"run_id": run.id, "status": run.status, "settled": run.terminal,
                "final_text": await final_text(rt, tenant_id, run)}
    if ref.kind == "runs":
        outs = [await outcome(rt, tenant_id, r) for r in v.runs]
        results = [{"index": i, "ok": o["status"] == RunStatus.COMPLETED.value or not o["settled"], **o}
                   for i, o in enumerate(outs)]
        settled = sum(1 for r in results if r.get("settled"))
        return {"mode": "join", "results": results, "settled": settled, "total": len(results),
                "timed_out": settled < len(results)}
    from treadle.api.loomcycle import spawn_result

    return {"results": [await spawn_result(rt, r) for r in v.runs], "spawned": len(v.runs)}


async def cancel(rt: Runtime, tenant_id: str, ref: TaskRef) -> None:
    """Cancel what the task follows: its runs, or (send) the resident's current turn."""
    await _runs(rt, tenant_id, ref)
    if ref.kind == "send":
        from treadle.api.steering import cancel_turn
        from treadle.errors import Conflict

        with suppress(Conflict):  # the turn is over already (or the run ended): nothing to stop
            await cancel_turn(rt, tenant_id, ref.run_ids[0], "cancelled by tasks/cancel")
        return
    for run_id in ref.run_ids:
        await rt.cancel_run(tenant_id, run_id, "cancelled by tasks/cancel")


# -- elicitation: an open question (or a resident waiting for input) as elicitation/create ----------

INPUT_KEY = "input"


def input_requests(v: TaskView) -> dict[str, dict[str, Any]]:
    """The 2026-07-28 `inputRequests` of an input_required task: one form elicitation per open
    Interruption (key: its id), or one asking for the next message (key `input:<run_id>`)."""
    out: dict[str, dict[str, Any]] = {}
    for q in v.pending:
        prop: dict[str, Any] = {"type": "string", "title": "answer"}
        options = [str(o) for o in q.options if isinstance(o, str | int | float)]
        if options:
            prop["enum"] = options
        out[q.id] = {"method": "elicitation/create",
                     "params": {"mode": "form", "message": q.question[:4000],
                                "requestedSchema": {"type": "object", "properties": {"answer": prop},
                                                    "required": ["answer"]}}}
    if not v.pending and v.status == "input_required":
        for run in v.runs:
            out[f"{INPUT_KEY}:{run.id}"] = {
                "method": "elicitation/create",
                "params": {"mode": "form", "message": v.message or "the run waits for its next message",
                           "requestedSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                                               "required": ["text"]}}}
    return out


async def apply_responses(rt: Runtime, tenant_id: str, subject: str, v: TaskView,
                          responses: dict[str, Any]) -> int:
    """Resolve the task's questions with elicitation results (`{action, content}` by request key):
    accept answers, decline/cancel declines (an Interruption) or sends nothing (input). Keys the
    task did not ask are refused by name. Returns how many were applied."""
    asked = {q.id: q for q in v.pending}
    applied = 0
    for key, raw in responses.items():
        result = raw.model_dump(by_alias=True) if hasattr(raw, "model_dump") else dict(raw or {})
        action = result.get("action")
        content = result.get("content") or {}
        if key in asked:
            q = asked[key]
            accepted = action == "accept"
            answer_text = content.get("answer") if accepted else None
            row = await InterruptStore(rt.pool).resolve(
                tenant_id, q.run_id, q.id, answer=str(answer_text) if answer_text is not None else None,
                status="resolved" if accepted else "declined", resolved_by=f"mcp:{subject}")
            if row is not None:
                await rt.poke(tenant_id, [interrupt_key(row.id)])
                applied += 1
            continue
        kind, _, run_id = key.partition(":")
        if kind == INPUT_KEY and run_id in {r.id for r in v.runs}:
            text = content.get("text")
            if action == "accept" and isinstance(text, str) and text.strip():
                queued = await InputStore(rt.pool).add(tenant_id, run_id, "input", text)
                if queued.input_id is not None:
                    await rt.poke(tenant_id, [input_key(run_id)])
                    applied += 1
            continue
        raise ValidationFailed(f"inputResponses: {key[:200]!r} is not a request of task {v.ref.id[:200]!r}")
    return applied
