"""A run seen as an A2A 1.0 Task: the task id is the run id, the state is read from the run row
and what it waits on, the history and the answer from its events.

    queued                                  TASK_STATE_SUBMITTED
    running, or waiting on anything else    TASK_STATE_WORKING
    waiting on an Interruption or for input TASK_STATE_INPUT_REQUIRED (the next message answers)
    completed / failed / cancelled          TASK_STATE_COMPLETED / FAILED / CANCELED

A completed run's last assistant text is the task's one artifact (`answer`); an input-required
task carries the Interruption's question (or the run's last text) as its status message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from a2a.types import a2a_pb2 as pb
from google.protobuf.timestamp_pb2 import Timestamp

from treadle.domain.events import EventType
from treadle.store.db import Pool
from treadle.store.inputs import InputStore
from treadle.store.interrupts import Interrupt, InterruptStore
from treadle.store.runs import RunRecord, RunStore, session_id_of


class Runtime(Protocol):
    """What a task view reads: the runs and the pool (the runtime has both)."""

    @property
    def runs(self) -> RunStore: ...

    @property
    def pool(self) -> Pool: ...

#: run metadata keys the A2A server writes (a peer's context id, the message that started the run)
CONTEXT_KEY = "a2a_context_id"
MESSAGE_KEY = "a2a_message_id"

_STATES = {"queued": pb.TASK_STATE_SUBMITTED, "running": pb.TASK_STATE_WORKING,
           "completed": pb.TASK_STATE_COMPLETED, "failed": pb.TASK_STATE_FAILED,
           "cancelled": pb.TASK_STATE_CANCELED}
TERMINAL_STATES = frozenset({pb.TASK_STATE_COMPLETED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELED,
                             pb.TASK_STATE_REJECTED})


@dataclass(frozen=True)
class RunState:
    """What the task view needs of a run besides its row."""

    state: int
    pending: Interrupt | None  # the open Interruption an input-required run waits on, if any


def context_id_of(run: RunRecord) -> str:
    given = (run.metadata or {}).get(CONTEXT_KEY)
    return given if isinstance(given, str) and given else session_id_of(run.id)


async def run_state(rt: Runtime, run: RunRecord) -> RunState:
    if run.status != "waiting":
        return RunState(_STATES.get(run.status, pb.TASK_STATE_WORKING), None)
    pending = [i for i in await InterruptStore(rt.pool).list_for_run(run.tenant_id, run.id, "pending")
               if not i.expired]
    if pending:
        return RunState(pb.TASK_STATE_INPUT_REQUIRED, pending[0])
    keys = await InputStore(rt.pool).wait_keys(run.id)
    if f"input:{run.id}" in keys:
        return RunState(pb.TASK_STATE_INPUT_REQUIRED, None)
    return RunState(pb.TASK_STATE_WORKING, None)


def text_part(text: str) -> pb.Part:
    return pb.Part(text=text)


def agent_message(run: RunRecord, text: str, message_id: str) -> pb.Message:
    return pb.Message(message_id=message_id, context_id=context_id_of(run), task_id=run.id,
                      role=pb.ROLE_AGENT, parts=[text_part(text)])


def _user_text(payload: dict[str, Any]) -> str:
    return "\n\n".join(str(b.get("text", "")) for seg in payload.get("segments") or []
                       for b in seg.get("content") or [] if isinstance(b, dict) and "text" in b)


async def task_of(rt: Runtime, run: RunRecord, *, history_length: int | None = None,
                  state: RunState | None = None) -> pb.Task:
    """The task a run is now (`history_length`: the last N messages; 0 or None per the spec's
    default: all of them)."""
    state = state or await run_state(rt, run)
    events = await rt.runs.events(run.tenant_id, run.id, 0, 5000)
    history: list[pb.Message] = []
    last_text = ""
    for ev in events:
        if ev.type == EventType.USER_INPUT:
            text = _user_text(ev.payload)
            if text:
                history.append(pb.Message(message_id=f"{run.id}-{ev.seq}", context_id=context_id_of(run),
                                          task_id=run.id, role=pb.ROLE_USER, parts=[text_part(text)]))
        elif ev.type == EventType.TEXT and str(ev.payload.get("text", "")):
            last_text = str(ev.payload["text"])
            history.append(agent_message(run, last_text, f"{run.id}-{ev.seq}"))
    if history_length:
        history = history[-history_length:]
    stamp = Timestamp()
    stamp.FromDatetime(run.updated_at)
    status = pb.TaskStatus(state=state.state, timestamp=stamp)  # type: ignore[arg-type]
    if state.pending is not None:
        status.message.CopyFrom(agent_message(run, state.pending.question, f"{run.id}-i-{state.pending.id}"))
    elif state.state == pb.TASK_STATE_FAILED and run.error:
        status.message.CopyFrom(agent_message(run, str(run.error.get("error", "failed")), f"{run.id}-error"))
    elif last_text and state.state != pb.TASK_STATE_WORKING:
        status.message.CopyFrom(agent_message(run, last_text, f"{run.id}-status-{run.last_seq}"))
    task = pb.Task(id=run.id, context_id=context_id_of(run), status=status, history=history)
    task.metadata.update({"agent": run.agent, "run_status": run.status})
    if state.state == pb.TASK_STATE_COMPLETED:
        task.artifacts.append(pb.Artifact(artifact_id=f"{run.id}-answer", name="answer", parts=[text_part(last_text)]))
    return task


__all__ = ["CONTEXT_KEY", "MESSAGE_KEY", "TERMINAL_STATES", "RunState", "context_id_of", "run_state", "task_of"]
