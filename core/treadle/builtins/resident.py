"""`Agent` ops for resident sub-agents (loomcycle's RFC BK): `open`, `send`, `poll`, `cancel`, `close`.

A resident child is an interactive child run: it runs a turn, then parks for input (status
`waiting`, no worker, no coroutine) until its parent sends the next one. Each op answers loomcycle's
envelope `{child_run_id, state, output}` — `state`: `awaiting_input` (parked, ready for a send),
`running` (mid-turn), `completed` / `failed` / `cancelled` (the child ended), `closed`.

- `open` (`name`, `prompt`, `def_id`?, `idle_ttl_seconds`? — 0: the calling agent's
  `resident_idle_ttl_seconds` —, `compaction`? as spawn's) starts the child under spawn's rules
  (a configured agent or that AgentDef version, depth ≤ 3, the caller's hosts, volumes and
  parent_context, at most `max_resident_children` open per run) and parks the caller until its
  first turn ends.
- `send` (`child_run_id`, `prompt`, `timeout_ms`?) queues the next user turn on the child (its
  steering queue, store/inputs.py) and parks the caller until that turn ends; `timeout_ms` bounds the
  wait (its end answers `running` with the output so far) and `timeout_ms: 0` answers at once.
  A child still in a turn refuses a send (`resident_busy`): poll it, or cancel the turn.
- `poll` (`child_run_id`, `timeout_ms`?) answers the current turn's state and output at once, or
  with `timeout_ms` > 0 parks until the turn ends or the time is up.
- `cancel` (`child_run_id`) stops the child's current turn (a turn cancel: it parks for input
  again, alive) and waits for it to park (at most 15 s); a parked child is a no-op.
- `close` (`child_run_id`) ends the child (its run is cancelled, `closed by parent`); idempotent.

How waiting stays exact: the caller parks (kind `resident`) on the child's `parent_wait_key`; the
child pokes it when a turn ends (engine/step.py, `park_for_input`'s wake) and when it ends, and
the sweeper pokes it when that wake-up was lost (store/residents.py `settled_waits`). Each
re-invocation reads the key's version first, then the child's transcript, which alone says whether
the turn the call waits for is over (`turn_view`). A send's queued input commits with the
caller's park (the tool is transactional), so a re-run step never sends twice.
Idle children close at their TTL and a parent's end closes its residents (the sweeper and the
engine, engine/waking.py `close_residents`); a parent's turn cancel leaves them alive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from treadle.builtins.spawning import MAX_AGENT_DEPTH, check_pins, child_compaction
from treadle.config import CompactionConfig
from treadle.domain.events import EventType
from treadle.engine.plan import input_key
from treadle.errors import ToolError
from treadle.store.db import after_commit
from treadle.store.inputs import InputStore
from treadle.store.residents import Resident, ResidentStore
from treadle.store.runs import NewRun
from treadle.tools.base import Park, ToolContext, ToolResult

RESIDENT_OPS = ("open", "send", "poll", "cancel", "close")
WAIT_KIND = "resident"
MAX_TIMEOUT_MS = 86_400_000  # 24 h
MAX_IDLE_TTL_S = 30 * 86_400
#: how long `cancel` waits for the child to park again (loomcycle's residentCancelReparkTimeout)
CANCEL_REPARK_S = 15.0
MAX_PROMPT_CHARS = 256_000
CLOSED_BY_PARENT = "closed by parent"

RESIDENT_PROPS: dict[str, Any] = {
    "child_run_id": {"type": "string", "description": "send/poll/cancel/close: the child_run_id op=open returned"},
    "idle_ttl_seconds": {"type": "integer", "minimum": 0, "description": "open: close the child after this "
                         "many seconds without a send (0: the operator's default)"},
    "timeout_ms": {"type": "integer", "minimum": 0, "description": "send: omitted — wait until the child's turn "
                   "ends; 0 — answer at once; > 0 — wait at most this long (then state running and the output "
                   "so far). poll: 0/omitted — a snapshot; > 0 — wait up to this long for the turn to end"},
}


def resident_key(parent_run_id: str, tool_use_id: str) -> str:
    """The key a resident's parent parks on (its child's `parent_wait_key`), also the child's
    idempotency key: the `open` call that made it."""
    return f"resident:{parent_run_id}:{tool_use_id}"


def _fail(code: str, message: str) -> ToolError:
    return ToolError(f"{code}: {message}", code=code)


# -- a turn, read from the child's transcript (pure) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnView:
    #: the turn asked about has ended (the child parked for input after it, or the child ended)
    ended: bool
    #: the turn's text so far
    output: str
    #: the steering id of the turn the child is in now (0: its opening turn)
    current_input: int
    #: the highest steering id the child's transcript has taken (a manual compaction's included)
    consumed: int


def _input_id(etype: str, payload: dict[str, Any], *, turns_only: bool = True) -> int:
    kinds = (EventType.USER_INPUT, EventType.TURN_CANCELLED) if turns_only else (
        EventType.USER_INPUT, EventType.TURN_CANCELLED, EventType.CONTEXT_COMPACTION, EventType.COMPACTION_FAILED)
    if etype in kinds:
        value = payload.get("input_id")
        if isinstance(value, int):
            return value
    return 0


def turn_view(events: list[tuple[int, str, dict[str, Any]]], *, start: int | None, done: int | None = None,
              ended_run: bool = False) -> TurnView:
    """The turn that began with steering input `start` (0: the opening turn; None: the turn the
    child is in now): has it ended, and what it said. `done`: the input whose turn must have ended
    instead (a cancel: the turn its `turn_cancelled` ends). A turn ends at the first
    `awaiting_input` after its marker; an input not yet in the transcript is a turn not begun."""
    markers = {iid: seq for seq, t, p in events if (iid := _input_id(t, p))}
    consumed = max((_input_id(t, p, turns_only=False) for _s, t, p in events), default=0)
    current = max(markers, default=0)
    start_id = current if start is None else start
    start_seq = 0 if start_id == 0 else markers.get(start_id)
    done_id = start_id if done is None else done
    done_seq = 0 if done_id == 0 else markers.get(done_id)
    if start_seq is None:  # the input is queued, not yet taken: its turn has not begun
        return TurnView(ended_run, "", current, consumed)
    texts: list[str] = []
    for seq, etype, payload in events:
        if seq <= start_seq:
            continue
        if etype == EventType.AWAITING_INPUT:
            break
        if etype == EventType.TEXT:
            texts.append(str(payload.get("text") or ""))
    ended = ended_run or (done_seq is not None and any(
        t == EventType.AWAITING_INPUT and seq > done_seq for seq, t, _p in events))
    return TurnView(ended, "\n".join(t for t in texts if t), current, consumed)


def envelope(child_run_id: str, state: str, output: str) -> ToolResult:
    return ToolResult.json({"child_run_id": child_run_id, "state": state, "output": output})


def state_of(resident: Resident, view: TurnView) -> str:
    if resident.closed:
        return "closed"
    if resident.ended:
        return resident.status
    return "awaiting_input" if view.ended else "running"


# -- the ops ------------------------------------------------------------------------------------------


async def invoke(ctx: ToolContext, op: str, args: dict[str, Any]) -> ToolResult | Park:
    store = ctx.services.residents
    if store is None:
        raise _fail("resident_unavailable", f"Agent op={op} (resident sub-agent) is not available on this runtime")
    if op == "open":
        return await _open(ctx, store, args)
    child_id = args.get("child_run_id")
    if not isinstance(child_id, str) or not child_id.strip():
        raise _fail("missing_field", f"Agent.{op}: child_run_id (the id op=open returned) is required")
    child_id = child_id.strip()
    if op == "close":
        return await _close(ctx, store, child_id)
    if op == "send":
        return await _send(ctx, store, child_id, args)
    if op == "poll":
        return await _poll(ctx, store, child_id, args)
    return await _cancel(ctx, store, child_id)


async def _owned(ctx: ToolContext, store: ResidentStore, child_id: str) -> Resident:
    """The caller's own resident (a child of another run, or of another tenant: not found)."""
    resident = await store.get(ctx.tenant_id, child_id)
    if resident is None or resident.parent_run_id != ctx.run_id:
        raise _fail("resident_not_found", f"resident sub-agent {child_id!r} not found (it may have been closed "
                    "or timed out)")
    return resident


async def _answer(ctx: ToolContext, store: ResidentStore, resident: Resident, *, start: int | None,
                  done: int | None = None) -> tuple[TurnView, str]:
    events = await store.turn_events(ctx.tenant_id, resident.run_id)
    view = turn_view(events, start=start, done=done, ended_run=resident.ended or resident.closed)
    return view, state_of(resident, view)


def _park(resident: Resident, version: int, extra: dict[str, Any], deadline_s: float | None = None) -> Park:
    return Park(WAIT_KIND, {resident.wait_key: version}, deadline_s=deadline_s,
                extra={**extra, "child_run_id": resident.run_id})


def _timeout_ms(args: dict[str, Any], op: str) -> int | None:
    value = args.get("timeout_ms")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TIMEOUT_MS:
        raise _fail("invalid_field", f"Agent.{op}: timeout_ms must be an integer from 0 to {MAX_TIMEOUT_MS}")
    return value


def _prompt(args: dict[str, Any], op: str) -> str:
    prompt = args.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise _fail("missing_field", f"Agent.{op}: prompt (non-empty text) is required")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise _fail("invalid_field", f"Agent.{op}: prompt is longer than {MAX_PROMPT_CHARS} characters")
    return prompt


async def _open(ctx: ToolContext, store: ResidentStore, args: dict[str, Any]) -> ToolResult | Park:
    key = resident_key(ctx.run_id, ctx.tool_use_id)
    version = await ctx.waits.version(ctx.tenant_id, key)  # before looking at the child
    extra = (ctx.resume or {}).get("extra") or {}
    child_id = extra.get("child_run_id")
    if not isinstance(child_id, str):
        child_id = await _start(ctx, store, args, key)
    resident = await store.get(ctx.tenant_id, child_id)
    if resident is None:  # deleted meanwhile (retention, erasure)
        raise _fail("resident_not_found", f"resident sub-agent {child_id!r} is gone")
    view, state = await _answer(ctx, store, resident, start=0)
    if not view.ended:
        return _park(resident, version, {"op": "open"})
    return envelope(resident.run_id, state, view.output)


async def _start(ctx: ToolContext, store: ResidentStore, args: dict[str, Any], key: str) -> str:
    """Validate an `open` and start its child under spawn's rules (idempotent per call)."""
    if args.get("child_run_id") is not None:
        raise _fail("invalid_field", "Agent.open mints a new child; do not pass child_run_id (send to the id "
                    "op=open returns)")
    name = args.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _fail("missing_field", "Agent.open: name (an agent name) is required")
    name = name.strip()
    prompt = _prompt(args, "open")
    def_id = args.get("def_id")
    if def_id is not None and (not isinstance(def_id, str) or not 0 < len(def_id) <= 64):
        raise _fail("invalid_field", "Agent.open: def_id must be an AgentDef id (a string)")
    ttl = args.get("idle_ttl_seconds", 0)
    if isinstance(ttl, bool) or not isinstance(ttl, int) or not 0 <= ttl <= MAX_IDLE_TTL_S:
        raise _fail("invalid_field", f"Agent.open: idle_ttl_seconds must be an integer from 0 to {MAX_IDLE_TTL_S}"
                    " (0: the operator's default)")
    services = ctx.services
    if def_id:
        await check_pins(services.defs, ctx.tenant_id, [{"name": name, "def_id": def_id}])
    elif await services.agents.current(ctx.tenant_id, name) is None:
        configured = ", ".join(services.agents.static_names())
        raise _fail("unknown_agent", f"Agent.open: unknown agent {name!r} (configured: {configured}; or a "
                    "promoted AgentDef)")
    cap = ctx.agent_config.max_resident_children
    if await store.count_open(ctx.tenant_id, ctx.run_id) >= cap:
        raise _fail("resident_cap", f"resident sub-agent cap reached ({cap} open for this run); close one "
                    "before opening another")
    depth, root = await services.subruns.lineage(ctx.tenant_id, ctx.run_id)
    if depth + 1 > MAX_AGENT_DEPTH:
        raise _fail("max_depth", f"Agent.open: sub-agents may nest at most {MAX_AGENT_DEPTH} deep (this run is "
                    f"at depth {depth})")
    spawn: dict[str, Any] = {"name": name, "prompt": prompt, **({"def_id": def_id} if def_id else {})}
    if args.get("compaction") is not None:  # spawn's: the child's compaction over what it inherits
        try:
            spawn["compaction"] = CompactionConfig.model_validate(args["compaction"]).model_dump(exclude_none=True)
        except ValidationError as exc:
            raise _fail("invalid_field", f"Agent.open: compaction: {exc.errors()[0]['msg']}") from None
    run, _created = await services.starter.start_run(NewRun(
        tenant_id=ctx.tenant_id,
        agent=name,
        segments=[{"role": "user", "content": [{"type": "trusted-text", "text": prompt}]}],
        user_id=ctx.user_id,
        interactive=True,
        idempotency_key=key,
        parent_run_id=ctx.run_id,
        root_run_id=root,
        depth=depth + 1,
        parent_wait_key=key,
        def_id=def_id or None,
        allowed_hosts=ctx.allowed_hosts,  # a child never reaches further than its parent
        parent_context=ctx.parent_context,
        run_options=await child_compaction(ctx, spawn),
    ))
    if services.volumes is not None:  # nor reaches more volumes, or with a wider mode
        await services.volumes.grant_child(ctx.tenant_id, ctx.run_id, ctx.agent_config, run.id)
    await store.add(ctx.tenant_id, run.id, ctx.run_id, name, ttl or ctx.agent_config.resident_idle_ttl_seconds)
    return run.id


async def _send(ctx: ToolContext, store: ResidentStore, child_id: str, args: dict[str, Any]) -> ToolResult | Park:
    resident = await _owned(ctx, store, child_id)
    version = await ctx.waits.version(ctx.tenant_id, resident.wait_key)  # before looking at the child
    resume = ctx.resume
    if resume is None:  # the first invocation: deliver the turn (it commits with this call's park or result)
        prompt = _prompt(args, "send")
        timeout = _timeout_ms(args, "send")
        if resident.closed or resident.ended:
            raise _fail("resident_closed", f"resident sub-agent {child_id!r} is {state_of(resident, _idle)}; "
                        "open a new one")
        now, state = await _answer(ctx, store, resident, start=None)
        if state != "awaiting_input" or resident.input_seq > now.consumed:
            raise _fail("resident_busy", f"resident sub-agent {child_id!r} is still running its previous turn; "
                        "poll to await it or cancel to interrupt")
        queued = await InputStore(ctx.services.runs.pool).add(ctx.tenant_id, child_id, "input", prompt)
        if queued.input_id is None:
            raise _fail("resident_busy" if queued.queue_full else "resident_closed",
                        f"resident sub-agent {child_id!r} cannot take input now ({queued.status})")
        await store.touch(ctx.tenant_id, child_id)
        await ctx.services.waker.poke(ctx.tenant_id, [input_key(child_id)])
        if timeout == 0:
            return envelope(child_id, "running", "")
        return _park(resident, version, {"op": "send", "input_id": queued.input_id},
                     None if timeout is None else timeout / 1000)
    input_id = int((resume.get("extra") or {}).get("input_id") or 0)
    view, state = await _answer(ctx, store, resident, start=input_id)
    if view.ended or ctx.deadline_passed():
        return envelope(child_id, state, view.output)
    return _park(resident, version, {"op": "send", "input_id": input_id})


async def _poll(ctx: ToolContext, store: ResidentStore, child_id: str, args: dict[str, Any]) -> ToolResult | Park:
    resident = await _owned(ctx, store, child_id)
    version = await ctx.waits.version(ctx.tenant_id, resident.wait_key)  # before looking at the child
    timeout = _timeout_ms(args, "poll") if ctx.resume is None else None
    view, state = await _answer(ctx, store, resident, start=None)
    pending = resident.input_seq > view.consumed  # a send's input not yet taken: a turn is due
    if pending and state == "awaiting_input":
        state = "running"
    waits = ctx.resume is not None or bool(timeout)
    if state != "running" or not waits or ctx.deadline_passed():
        return envelope(child_id, state, "" if pending else view.output)
    return _park(resident, version, {"op": "poll"}, timeout / 1000 if timeout else None)


async def _cancel(ctx: ToolContext, store: ResidentStore, child_id: str) -> ToolResult | Park:
    resident = await _owned(ctx, store, child_id)
    version = await ctx.waits.version(ctx.tenant_id, resident.wait_key)  # before looking at the child
    extra = (ctx.resume or {}).get("extra") or {}
    if ctx.resume is None:
        view, state = await _answer(ctx, store, resident, start=None)
        if state != "running" and resident.input_seq <= view.consumed:
            return envelope(child_id, state, view.output)  # parked (or gone): nothing to cancel
        inputs = InputStore(ctx.services.runs.pool)
        queued = await inputs.add(ctx.tenant_id, child_id, "turn_cancel", "cancelled by parent (resident sub-agent)")
        if queued.input_id is None:
            raise _fail("resident_closed", f"resident sub-agent {child_id!r} cannot be cancelled now ({queued.status})")
        waker, tenant = ctx.services.waker, ctx.tenant_id

        async def wake_child() -> None:  # wherever it is parked once the cancel is stored (committed)
            await waker.poke(tenant, sorted({*await inputs.wait_keys(child_id), input_key(child_id)}))

        await after_commit(wake_child)
        extra = {"op": "cancel", "input_id": view.current_input, "cancel_id": queued.input_id}
        return _park(resident, version, extra, CANCEL_REPARK_S)
    view, state = await _answer(ctx, store, resident, start=int(extra.get("input_id") or 0),
                                done=int(extra.get("cancel_id") or 0))
    if view.ended or ctx.deadline_passed():
        return envelope(child_id, state, view.output)
    return _park(resident, version, {k: v for k, v in extra.items() if k != "child_run_id"})


async def _close(ctx: ToolContext, store: ResidentStore, child_id: str) -> ToolResult:
    resident = await store.get(ctx.tenant_id, child_id)
    if resident is None or resident.parent_run_id != ctx.run_id:
        return envelope(child_id, "closed", "")  # idempotent, and opaque: loomcycle's close of an unknown child
    if await store.mark_closed(ctx.tenant_id, child_id, CLOSED_BY_PARENT) and not resident.ended:
        await ctx.services.canceller.cancel_run(ctx.tenant_id, child_id, CLOSED_BY_PARENT)
    return envelope(child_id, "closed", "")


_idle = TurnView(True, "", 0, 0)
