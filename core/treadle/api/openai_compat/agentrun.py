"""A chat completion answered by a treadle agent: a durable run of the agent loop.

- **New turn** (the last message is a user message): a run of the agent starts. System/developer
  messages become a system segment; the latest user message(s) the prompt; earlier turns are
  rendered above it as "the conversation so far" (one trusted-text block), since a run starts from
  a prompt, not from a transcript. The request's `tools` become the run's application tools
  (`client_tools`); `user` becomes the run's `user_id`.
- The run goes on server-side — the agent's own tools, sub-agents, retries — until it **ends**
  (the answer is the text of every assistant turn of this request, joined by a blank line) or it
  **parks on application tools**: then the answer is those calls as `tool_calls`
  (`finish_reason: tool_calls`), with ids `tc.<run_id>.<tool_use_id>`.
- **Continuation** (the messages end with `tool` messages answering such ids): the results are
  posted to the parked run (as `POST /v1/runs/{id}/tool_results` does) and the same run goes on.
- The run is durable: a client that disconnects does not stop it (`treadle.run_id` in the body,
  `x-treadle-run-id` header; follow it with /v1/runs/{id}/stream).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from treadle.api.clienttools import ClientToolSpec, client_tool_specs
from treadle.api.modelcall import TextReconciler
from treadle.api.openai_compat.wire import (
    ChatMessage,
    ChatRequest,
    UnsupportedParameter,
    finish_reason,
    tool_call_json,
)
from treadle.domain.events import EventType
from treadle.domain.ids import is_identifier
from treadle.errors import NotFound, ProviderError, TreadleError
from treadle.runtime import Runtime
from treadle.store.clienttools import client_tool_key
from treadle.store.runs import NewRun, StoredEvent

CALL_PREFIX = "tc."
#: the longest a request follows its run before answering 504 run_still_running
FOLLOW_BUDGET_S = 900.0
POLL_S = 0.25


class RunStillRunning(TreadleError):
    """The run neither ended nor parked on application tools within the follow budget."""

    code = "run_still_running"
    status = 504


def call_id(run_id: str, tool_use_id: str) -> str:
    return f"{CALL_PREFIX}{run_id}.{tool_use_id}"


def parse_call_id(value: str) -> tuple[str, str] | None:
    if not value.startswith(CALL_PREFIX):
        return None
    run_id, dot, tool_use_id = value[len(CALL_PREFIX):].partition(".")
    return (run_id, tool_use_id) if dot and run_id and tool_use_id else None


def refuse_sampling(req: ChatRequest) -> None:
    """An agent brings its own model settings: per-request ones are refused, not ignored."""
    for name in ("temperature", "max_tokens", "max_completion_tokens"):
        if getattr(req, name) is not None:
            raise UnsupportedParameter(f"{name} applies to a model alias or tier; the agent {req.model!r} uses its "
                                       "own model settings", name)
    if req.response_format is not None and req.response_format.type in ("json_object", "json_schema"):
        raise UnsupportedParameter(f"response_format applies to a model alias or tier; the agent {req.model!r} "
                                   "answers in its own format", "response_format")
    for name in ("reasoning_effort",):
        if getattr(req, name) is not None:
            raise UnsupportedParameter(f"{name} applies to a model alias or tier; the agent {req.model!r} uses its "
                                       "own model settings", name)
    for k, t in enumerate(req.tools or ()):
        if t.function.strict:
            raise UnsupportedParameter(f"strict tools apply to a model alias or tier; the agent {req.model!r} "
                                       "checks no application tool arguments", f"tools.{k}.function.strict")
    if req.parallel_tool_calls is False:
        raise UnsupportedParameter(f"parallel_tool_calls=false applies to a model alias or tier; the agent "
                                   f"{req.model!r} chooses its own tools", "parallel_tool_calls")
    if req.tool_choice is not None and req.tool_choice != "auto":
        raise UnsupportedParameter(f"tool_choice applies to a model alias or tier; the agent {req.model!r} "
                                   "chooses its own tools", "tool_choice")


def _render(m: ChatMessage) -> str:
    lines = [f"{m.role}: {m.text()}"] if m.text() else []
    for tc in m.tool_calls or ():
        lines.append(f"{m.role} [tool_call {tc.function.name}]: {tc.function.arguments}")
    if m.role == "tool":
        lines = [f"tool [result]: {m.text()}"]
    return "\n".join(lines)


def segments_of(req: ChatRequest) -> list[dict[str, Any]]:
    for i, m in enumerate(req.messages):
        if m.has_images():
            raise UnsupportedParameter("images are not accepted for an agent run here", f"messages.{i}.content")
    system = [m.text() for m in req.messages if m.role in ("system", "developer")]
    talk = [m for m in req.messages if m.role not in ("system", "developer")]
    if not talk or talk[-1].role != "user":
        raise UnsupportedParameter("a new agent turn ends with a user message (or with tool results for the "
                                   "agent's tc.* calls)", "messages", code="invalid_value")
    first_new = len(talk)
    while first_new > 0 and talk[first_new - 1].role == "user":
        first_new -= 1
    history, latest = talk[:first_new], talk[first_new:]
    blocks: list[dict[str, Any]] = []
    if history:
        rendered = "\n\n".join(r for r in map(_render, history) if r)
        blocks.append({"type": "trusted-text", "text": f"The conversation so far:\n\n{rendered}\n\nThe user now says:"})
    blocks.extend({"type": "trusted-text", "text": m.text()} for m in latest)
    segments: list[dict[str, Any]] = []
    if any(system):
        segments.append({"role": "system", "content": [{"type": "trusted-text", "text": "\n\n".join(system)}]})
    segments.append({"role": "user", "content": blocks})
    return segments


async def open_turn(rt: Runtime, tenant: str, req: ChatRequest, session_id: str | None = None) -> tuple[str, int]:
    """Start the agent's run (continuing `session_id` if given), or hand the tool results to the
    run that asked for them; returns (run id, the run's last event seq before this request)."""
    refuse_sampling(req)
    trailing: list[ChatMessage] = []
    for m in reversed(req.messages):
        if m.role != "tool":
            break
        trailing.insert(0, m)
    if trailing:
        return await _continue(rt, tenant, req, trailing)
    user_id = req.user
    if user_id is not None and not is_identifier(user_id):
        raise UnsupportedParameter("user must match [A-Za-z0-9_-]{1,128} (it becomes the run's user_id)", "user",
                                   code="invalid_value")
    await rt.refuse_if_paused()
    specs = [ClientToolSpec(name=t.function.name, description=t.function.description,
                            input_schema=t.function.parameters) for t in req.tools or ()]
    run, _ = await rt.start_run(NewRun(
        tenant_id=tenant, agent=req.model, segments=segments_of(req), user_id=user_id,
        client_tools=client_tool_specs(rt, specs or None, None), session_id=session_id,
    ))
    return run.id, 0


async def _continue(rt: Runtime, tenant: str, req: ChatRequest, trailing: list[ChatMessage]) -> tuple[str, int]:
    first = len(req.messages) - len(trailing)
    answers: list[tuple[str, str, str]] = []
    for k, m in enumerate(trailing):
        parsed = parse_call_id(m.tool_call_id or "")
        if parsed is None:
            raise UnsupportedParameter(f"tool_call_id {m.tool_call_id!r} is not a call of a treadle agent run "
                                       "(those ids look like tc.<run_id>.<call>)", f"messages.{first + k}.tool_call_id",
                                       code="invalid_value")
        answers.append((*parsed, m.text()))
    run_ids = {a[0] for a in answers}
    if len(run_ids) > 1:
        raise UnsupportedParameter("the tool results answer calls of more than one run", "messages",
                                   code="invalid_value")
    run_id = run_ids.pop()
    run = await rt.runs.get(tenant, run_id)
    if run is None or run.agent != req.model:
        raise NotFound(f"no run {run_id!r} of agent {req.model!r} asked for these tool results",
                       code="run_not_found")
    for _run, tool_use_id, content in answers:
        await rt.engine.tools.client_results.answer(tenant, run_id, tool_use_id, content, False)
    await rt.poke(tenant, [client_tool_key(run_id, tu) for _r, tu, _c in answers])
    return run_id, run.last_seq


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Ended:
    finish_reason: str
    tool_calls: list[dict[str, Any]]
    usage: tuple[int, int]


@dataclass(slots=True)
class _Follow:
    start_seq: int
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)  # client calls without a result
    texts: dict[int, TextReconciler] = field(default_factory=dict)
    stored: set[int] = field(default_factory=set)  # iterations whose assembled text is stored
    input_tokens: int = 0
    output_tokens: int = 0

    def text(self, iteration: int) -> tuple[TextReconciler, str]:
        """The iteration's reconciler, and the separator to send before its first text."""
        if iteration in self.texts:
            return self.texts[iteration], ""
        sep = "\n\n" if any(r.sent for r in self.texts.values()) else ""
        self.texts[iteration] = TextReconciler()
        return self.texts[iteration], sep


def _failure(payload: dict[str, Any]) -> ProviderError:
    return ProviderError(f"the agent run failed: {payload.get('error') or payload}",
                         code=str(payload.get("code") or "run_failed"))


async def follow(rt: Runtime, tenant: str, run_id: str, start_seq: int, *, live: bool = True,
                 wait: bool = True, stop_at: Callable[[], float] | None = None) -> AsyncIterator[Text | Ended]:
    """The run's answer to this request: text as it is produced (live deltas where this process
    drives the model, else the stored turns), then `Ended`. Raises ProviderError if the run fails.
    `live=False`: the stored turns only (the same text, in pieces that depend on the transcript
    alone, so a retelling is identical); `wait=False`: stop, without `Ended`, where the transcript
    ends while the run goes on; `stop_at()`: a monotonic time that ends the wait sooner than the
    budget (RunStillRunning), as the cloud's buffered SSE lingers."""
    st = _Follow(start_seq)
    cursor = 0
    budget = min(FOLLOW_BUDGET_S, rt.sse_budget_s or FOLLOW_BUDGET_S)
    deadline = time.monotonic() + budget
    with rt.hub.subscribe(run_id) as sub:
        while True:
            held = sub.drain()
            events = await rt.runs.events(tenant, run_id, cursor, 500)
            for ev in events:
                cursor = ev.seq
                for item in _on_event(st, ev):
                    yield item
                    if isinstance(item, Ended):
                        return
            if len(events) == 500:
                continue
            for frame in held if live else ():
                it = frame.data.get("iteration")
                if frame.event != EventType.TEXT_DELTA or not isinstance(it, int) or it in st.stored:
                    continue
                recon, sep = st.text(it)
                piece = recon.delta(int(frame.data.get("attempt") or 0), str(frame.data.get("text") or ""))
                if piece:
                    yield Text(sep + piece)
            if not events:
                run = await rt.runs.get(tenant, run_id)
                if run is None:
                    raise NotFound(f"run {run_id!r} not found", code="run_not_found")
                if run.last_seq <= cursor and run.terminal:
                    yield Ended(finish_reason(run.stop_reason), [], (st.input_tokens, st.output_tokens))
                    return
                if run.last_seq <= cursor and run.status == "waiting" and st.pending:
                    calls = [tool_call_json(call_id(run_id, tu_id), str(tu.get("name")), dict(tu.get("input") or {}))
                             for tu_id, tu in st.pending.items()]
                    yield Ended("tool_calls", calls, (st.input_tokens, st.output_tokens))
                    return
                if not wait:
                    return
                if time.monotonic() >= min(deadline, stop_at() if stop_at else deadline):
                    raise RunStillRunning(f"run {run_id} has neither ended nor asked for a tool within {budget:g} s; "
                                          f"follow it at /v1/runs/{run_id}/stream")
            await sub.wait(POLL_S)


def _on_event(st: _Follow, ev: StoredEvent) -> list[Text | Ended]:
    p = ev.payload
    if ev.type == EventType.TOOL_PENDING:
        tu = p.get("tool_use") or {}
        st.pending[str(tu.get("id"))] = tu
    elif ev.type == EventType.TOOL_RESULT:
        st.pending.pop(str((p.get("tool_use") or {}).get("id")), None)
    if ev.seq <= st.start_seq:
        return []
    if ev.type == EventType.TEXT and isinstance(p.get("iteration"), int):
        it, text = int(p["iteration"]), str(p.get("text") or "")
        st.stored.add(it)
        if not text:
            return []
        recon, sep = st.text(it)
        rest = recon.rest(text)
        return [Text(sep + rest)] if rest or sep else []
    if ev.type == EventType.USAGE:
        u = p.get("usage") or {}
        st.input_tokens += int(u.get("input_tokens") or 0)
        st.output_tokens += int(u.get("output_tokens") or 0)
    elif ev.type == EventType.DONE:
        if p.get("stop_reason") == "cancelled":
            raise ProviderError(f"the agent run was cancelled: {p.get('reason') or ''}".strip(), code="run_cancelled")
        return [Ended(finish_reason(str(p.get("stop_reason"))), [], (st.input_tokens, st.output_tokens))]
    elif ev.type == EventType.ERROR:
        raise _failure(p)
    return []

