"""The A2A request handler (`a2a-sdk`'s RequestHandler) over treadle's runs: a task is a run.

`SendMessage` without a task id starts a run of the exposed agent its `skillId` names (the
message id is the run's idempotency key, so a retried send gets its task back); with a task id
it answers the task: the open Interruption is resolved with the text, otherwise the text is the
run's next input (an interactive run parked for input wakes on it). A blocking send answers once
the task is terminal or needs input, or when the wait budget ends (then `WORKING`: poll GetTask
or SubscribeToTask). `SendStreamingMessage` / `SubscribeToTask` stream the task from the run's
stored events, so a cut stream resumes by subscribing again; nothing is held in memory between
requests. Push notification configs (`tasks/pushNotificationConfig/*`, or a send's configuration)
are stored per task and delivered by the maintenance pass (treadle/a2a/push.py); the extended card
is refused (the card does not offer it)."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import MessageToDict

from treadle.a2a.tasks import (
    CONTEXT_KEY,
    MESSAGE_KEY,
    TERMINAL_STATES,
    context_id_of,
    run_state,
    task_of,
)
from treadle.api.a2a.pushconfig import DEFAULT_CONFIG_ID, push_config, push_offered, push_view, set_push
from treadle.api.steering import decode_cursor, encode_cursor
from treadle.domain.events import EventType
from treadle.engine.plan import input_key
from treadle.errors import TreadleError
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.specs.a2a import A2AServerCard
from treadle.store.a2a import A2APushStore
from treadle.store.inputs import InputStore
from treadle.store.interrupts import InterruptStore, interrupt_key
from treadle.store.runs import NewRun, RunRecord

#: how long a blocking SendMessage waits for the task to settle before answering WORKING
SEND_WAIT_S = 60.0
_STATUSES = {pb.TASK_STATE_SUBMITTED: "queued", pb.TASK_STATE_WORKING: "running",
             pb.TASK_STATE_COMPLETED: "completed", pb.TASK_STATE_FAILED: "failed",
             pb.TASK_STATE_CANCELED: "cancelled", pb.TASK_STATE_INPUT_REQUIRED: "waiting"}


def _caller(context: ServerCallContext) -> tuple[Runtime, Principal, A2AServerCard]:
    return context.state["treadle.rt"], context.state["treadle.who"], context.state["treadle.card"]


def _text_of(message: pb.Message) -> str:
    texts: list[str] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        else:
            raise InvalidParamsError(f"part {kind!r}: this agent takes text parts only (text/plain)")
    text = "\n\n".join(texts)
    if not text.strip():
        raise InvalidParamsError("message: needs a non-empty text part")
    return text


class RunTaskHandler(RequestHandler):
    """See the module docstring."""

    async def _run(self, rt: Runtime, who: Principal, card: A2AServerCard, task_id: str) -> RunRecord:
        run = await rt.runs.get(who.tenant_id, task_id)
        if run is None or not card.exposes(run.agent):
            raise TaskNotFoundError(f"task {task_id!r} not found")
        return run

    async def _send(self, params: pb.SendMessageRequest, context: ServerCallContext) -> RunRecord:
        rt, who, card = _caller(context)
        message = params.message
        text = _text_of(message)
        if params.metadata:
            raise InvalidParamsError("metadata: not taken on a request (put skillId in the message's metadata)")
        cfg = params.configuration
        push = cfg.task_push_notification_config if cfg.HasField("task_push_notification_config") else None
        if push is not None:
            push_config(card, push)  # refused before the run starts
        if message.task_id:
            run = await self._answer(rt, who, card, message.task_id, text)
        else:
            run = await self._start(rt, who, card, message, text)
        if push is not None:
            await set_push(rt, who, run.id, push)
        return run

    async def _start(self, rt: Runtime, who: Principal, card: A2AServerCard, message: pb.Message,
                     text: str) -> RunRecord:
        meta = MessageToDict(message.metadata) if message.HasField("metadata") else {}
        skill = meta.get("skillId")
        exposed = card.agent_for(skill if isinstance(skill, str) else None)
        if exposed is None:
            raise InvalidParamsError(f"skillId {skill!r}: names no skill of this agent" if skill else
                                     "metadata.skillId: required (this agent has several skills)")
        run, _ = await rt.start_run(NewRun(
            tenant_id=who.tenant_id, agent=exposed.agent_name,
            segments=[{"role": "user", "content": [{"type": "trusted-text", "text": text}]}],
            metadata={CONTEXT_KEY: message.context_id or None, MESSAGE_KEY: message.message_id},
            interactive=exposed.interactive,
            idempotency_key=f"a2a:{message.message_id}" if message.message_id else None,
        ))
        return run

    async def _answer(self, rt: Runtime, who: Principal, card: A2AServerCard, task_id: str, text: str) -> RunRecord:
        run = await self._run(rt, who, card, task_id)
        if run.terminal:
            raise InvalidParamsError(f"task {task_id} is {run.status}: it takes no more messages")
        state = await run_state(rt, run)
        if state.pending is not None:
            row = await InterruptStore(rt.pool).resolve(who.tenant_id, run.id, state.pending.id, answer=text,
                                                        status="resolved", resolved_by=f"a2a:{who.subject}")
            if row is not None:
                await rt.poke(who.tenant_id, [interrupt_key(row.id)])
                return run
        queued = await InputStore(rt.pool).add(who.tenant_id, run.id, "input", text)
        if queued.input_id is None:
            raise InvalidParamsError(f"task {task_id} takes no input now ({queued.status})")
        await rt.poke(who.tenant_id, [input_key(run.id)])
        return run

    async def on_message_send(self, params: pb.SendMessageRequest, context: ServerCallContext) -> pb.Task:
        rt, who, _ = _caller(context)
        run = await self._send(params, context)
        answering = bool(params.message.task_id)
        deadline = time.monotonic() + SEND_WAIT_S
        while not params.configuration.return_immediately and time.monotonic() < deadline:
            now = await rt.runs.get(who.tenant_id, run.id)
            assert now is not None
            state = await run_state(rt, now)
            # an answer is not settled while the run still shows the question it answers
            fresh = not answering or now.last_seq > run.last_seq or now.status != "waiting"
            if state.state in TERMINAL_STATES or (state.state == pb.TASK_STATE_INPUT_REQUIRED and fresh):
                return await task_of(rt, now, history_length=params.configuration.history_length or None,
                                     state=state)
            with rt.hub.subscribe(run.id) as live:
                await live.wait(0.25)
        now = await rt.runs.get(who.tenant_id, run.id)
        assert now is not None
        return await task_of(rt, now, history_length=params.configuration.history_length or None)

    async def on_message_send_stream(self, params: pb.SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[Any]:
        run = await self._send(params, context)
        async for event in self._follow(context, run, params.message.task_id != ""):
            yield event

    async def on_subscribe_to_task(self, params: pb.SubscribeToTaskRequest,
                                   context: ServerCallContext) -> AsyncGenerator[Any]:
        rt, who, card = _caller(context)
        run = await self._run(rt, who, card, params.id)
        if run.terminal:
            raise UnsupportedOperationError(f"task {run.id} is {run.status}: read it with GetTask")
        async for event in self._follow(context, run, False):
            yield event

    async def _follow(self, context: ServerCallContext, run: RunRecord, answering: bool) -> AsyncGenerator[Any]:
        """The task, then a status update per assistant text and state change, until the task is
        terminal or needs input (or the stream's budget ends: subscribe again to resume)."""
        rt, who, _ = _caller(context)
        yield await task_of(rt, run)
        cursor = run.last_seq
        last_state: int | None = None
        started = time.monotonic()
        budget = rt.sse_budget_s or 3600.0
        while time.monotonic() - started < budget:
            with rt.hub.subscribe(run.id) as live:
                now = await rt.runs.get(who.tenant_id, run.id)
                assert now is not None
                events = await rt.runs.events(who.tenant_id, run.id, cursor, 500)
                for ev in events:
                    cursor = ev.seq
                    if ev.type == EventType.TEXT and str(ev.payload.get("text", "")):
                        yield self._status(now, pb.TASK_STATE_WORKING, str(ev.payload["text"]), ev.seq)
                state = await run_state(rt, now)
                fresh = not answering or now.last_seq > run.last_seq or now.status != "waiting"
                done = state.state in TERMINAL_STATES or (state.state == pb.TASK_STATE_INPUT_REQUIRED and fresh)
                if done and cursor >= now.last_seq:
                    task = await task_of(rt, now, state=state)
                    for artifact in task.artifacts:
                        yield pb.TaskArtifactUpdateEvent(task_id=run.id, context_id=context_id_of(now),
                                                         artifact=artifact, last_chunk=True)
                    yield pb.TaskStatusUpdateEvent(task_id=run.id, context_id=context_id_of(now), status=task.status)
                    return
                if state.state != last_state and not done:
                    last_state = state.state
                    yield pb.TaskStatusUpdateEvent(task_id=run.id, context_id=context_id_of(now),
                                                   status=pb.TaskStatus(state=state.state))  # type: ignore[arg-type]
                if len(events) < 500:
                    await live.wait(0.25)

    @staticmethod
    def _status(run: RunRecord, state: int, text: str, seq: int) -> pb.TaskStatusUpdateEvent:
        message = pb.Message(message_id=f"{run.id}-{seq}", context_id=context_id_of(run), task_id=run.id,
                             role=pb.ROLE_AGENT, parts=[pb.Part(text=text)])
        return pb.TaskStatusUpdateEvent(task_id=run.id, context_id=context_id_of(run),
                                        status=pb.TaskStatus(state=state, message=message))  # type: ignore[arg-type]

    async def on_get_task(self, params: pb.GetTaskRequest, context: ServerCallContext) -> pb.Task:
        rt, who, card = _caller(context)
        run = await self._run(rt, who, card, params.id)
        return await task_of(rt, run, history_length=params.history_length or None)

    async def on_list_tasks(self, params: pb.ListTasksRequest, context: ServerCallContext) -> pb.ListTasksResponse:
        rt, who, card = _caller(context)
        if params.status_timestamp_after.seconds or params.status_timestamp_after.nanos:
            raise InvalidParamsError("statusTimestampAfter: not supported; page with pageToken")
        status = _STATUSES.get(params.status) if params.status else None
        if params.status and status is None:
            raise InvalidParamsError("status: no run status maps to it")
        size = params.page_size or 50
        if not 1 <= size <= 100:
            raise InvalidParamsError("pageSize: 1..100")
        try:
            before = decode_cursor(params.page_token or None)
        except TreadleError as exc:
            raise InvalidParamsError(str(exc)) from None
        tasks: list[pb.Task] = []
        next_token = ""
        while len(tasks) < size:
            page = await rt.runs.list_runs(who.tenant_id, status, size, before)
            for run in page:
                before = (run.created_at, run.id)
                if not card.exposes(run.agent) or (params.context_id and context_id_of(run) != params.context_id):
                    continue
                task = await task_of(rt, run, history_length=params.history_length or None)
                if not params.include_artifacts:
                    del task.artifacts[:]
                tasks.append(task)
                if len(tasks) == size:
                    next_token = encode_cursor(run.created_at, run.id)
                    break
            if len(page) < size:
                break
        return pb.ListTasksResponse(tasks=tasks, next_page_token=next_token, page_size=size, total_size=len(tasks))

    async def on_cancel_task(self, params: pb.CancelTaskRequest, context: ServerCallContext) -> pb.Task:
        rt, who, card = _caller(context)
        run = await self._run(rt, who, card, params.id)
        if run.terminal:
            raise TaskNotCancelableError(f"task {run.id} is already {run.status}")
        cancelled = await rt.cancel_run(who.tenant_id, run.id, "cancelled over A2A")
        assert cancelled is not None
        return await task_of(rt, cancelled)

    async def on_create_task_push_notification_config(self, params: pb.TaskPushNotificationConfig,
                                                      context: ServerCallContext) -> pb.TaskPushNotificationConfig:
        rt, who, card = _caller(context)
        push_config(card, params)
        run = await self._run(rt, who, card, params.task_id)
        return await set_push(rt, who, run.id, params)

    async def on_get_task_push_notification_config(self, params: pb.GetTaskPushNotificationConfigRequest,
                                                   context: ServerCallContext) -> pb.TaskPushNotificationConfig:
        rt, who, card = _caller(context)
        push_offered(card)
        run = await self._run(rt, who, card, params.task_id)
        row = await A2APushStore(rt.pool).get(who.tenant_id, run.id, params.id or DEFAULT_CONFIG_ID)
        if row is None:
            raise TaskNotFoundError(f"task {run.id} has no push notification config {params.id!r}")
        return push_view(row)

    async def on_list_task_push_notification_configs(
        self, params: pb.ListTaskPushNotificationConfigsRequest, context: ServerCallContext,
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        rt, who, card = _caller(context)
        push_offered(card)
        if params.page_token:
            raise InvalidParamsError("pageToken: a task's push configs come in one page")
        run = await self._run(rt, who, card, params.task_id)
        rows = await A2APushStore(rt.pool).for_task(who.tenant_id, run.id)
        return pb.ListTaskPushNotificationConfigsResponse(configs=[push_view(r) for r in rows])

    async def on_delete_task_push_notification_config(self, params: pb.DeleteTaskPushNotificationConfigRequest,
                                                      context: ServerCallContext) -> None:
        rt, who, card = _caller(context)
        push_offered(card)
        run = await self._run(rt, who, card, params.task_id)
        if not await A2APushStore(rt.pool).delete(who.tenant_id, run.id, params.id or DEFAULT_CONFIG_ID):
            raise TaskNotFoundError(f"task {run.id} has no push notification config {params.id!r}")

    async def on_get_extended_agent_card(self, params: pb.GetExtendedAgentCardRequest,
                                         context: ServerCallContext) -> pb.AgentCard:
        raise UnsupportedOperationError("this agent has no extended card")


__all__ = ["SEND_WAIT_S", "RunTaskHandler"]
