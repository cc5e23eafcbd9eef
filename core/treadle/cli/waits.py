"""What a parked run waits on and the command that unblocks it — recursively: a parent parked on
its sub-agents waits on whatever its unfinished children wait on (a child's question to a human,
a channel message, an application's tool result), so the console names those, each with its own
command (`treadle describe`, the live view of `treadle run` / `treadle attach`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from treadle.domain.events import EventType

if TYPE_CHECKING:
    from treadle.client import AsyncTreadle
    from treadle.client.models import Run

#: the wait kinds a run parks on (tools' Park kinds, the engine's own)
AGENT = "agent"
INTERRUPTION = "interruption"
CLIENT_TOOL = "client_tool"
CHANNEL_KINDS = ("channel", "channel_await")
AWAITING_INPUT = EventType.AWAITING_INPUT.value
RUNTIME_PAUSE = "runtime_pause"
#: how deep the sub-agent tree is followed (deeper: named, not followed)
MAX_DEPTH = 6


@dataclass(slots=True)
class Blocker:
    """One thing a run (or a descendant) waits on: `what`, and the command that unblocks it
    (empty when nothing but time does)."""

    run_id: str
    agent: str
    depth: int
    what: str
    command: str = ""


def _channel(key: str) -> str:
    parts = key.split(":")  # channel:<name>:<scope id>
    return parts[1] if len(parts) >= 2 and parts[0] == "channel" else key


async def blockers(client: AsyncTreadle, run: Run, depth: int = 0) -> list[Blocker]:
    """What `run` waits on (its `waits`, as GET /v1/runs and /v1/runs/{id} give them), and below
    it, what its unfinished sub-agent runs wait on."""
    if run.status != "waiting":
        return []
    out: list[Blocker] = []
    kinds = {w.kind for w in run.waits or []}
    me = (run.run_id, run.agent, depth)
    for w in run.waits or []:
        if w.kind in CHANNEL_KINDS:
            name = _channel(w.key)
            out.append(Blocker(*me, f"a message on channel {name}",
                               f"POST /v1/_channels/{name}/publish {{\"value\": …}}"))
        elif w.kind == CLIENT_TOOL:
            out.append(Blocker(*me, f"the application's result of tool call {w.tool_use_id}",
                               f"POST /v1/runs/{run.run_id}/tool_results "
                               f"{{\"tool_use_id\": \"{w.tool_use_id}\", \"content\": …}}"))
        elif w.kind == AWAITING_INPUT:
            out.append(Blocker(*me, "your next message", f'treadle input {run.run_id} "your message"'))
        elif w.kind == RUNTIME_PAUSE:
            out.append(Blocker(*me, "the runtime to resume (it is paused)", "POST /v1/_resume"))
        elif w.kind not in (INTERRUPTION, AGENT):
            out.append(Blocker(*me, f"{w.kind} {w.key}" + (f" (until {w.deadline})" if w.deadline else "")))
    if INTERRUPTION in kinds:
        for q in (await client.runs.interrupts(run.run_id, status="pending")).interrupts:
            options = f"  [{' / '.join(str(o.get('label') if isinstance(o, dict) else o) for o in q.options)}]" \
                if q.options else ""
            out.append(Blocker(*me, f"an answer to: {q.question}{options}",
                               f'treadle answer {run.run_id} "your answer"'))
    if AGENT in kinds:
        children = [c for c in (await client.runs.list(parent_run_id=run.run_id, limit=100)).runs
                    if c.status in ("queued", "running", "waiting")]
        if not children:
            out.append(Blocker(*me, "its sub-agent runs (none unfinished: it wakes next)"))
        for child in children:
            if child.status != "waiting":
                out.append(Blocker(child.run_id, child.agent, depth + 1, f"sub-agent run {child.status}"))
            elif depth + 1 >= MAX_DEPTH:
                out.append(Blocker(child.run_id, child.agent, depth + 1, "a parked sub-agent run",
                                   f"treadle describe {child.run_id}"))
            else:
                out += await blockers(client, child, depth + 1)
    return out
