"""Running a turn's tool calls, by the kind of their effects (see `Tool.effects`):

- external calls run first, concurrently (bounded), outside any transaction — the assistant turn
  that asked for them is already recorded, so a crash re-runs just these calls;
- transactional calls then run one after another inside the step's commit transaction, each in
  a savepoint: a call that raises leaves no trace of its writes, and every write commits with
  the call's `tool_result` and the step advance, or not at all.

A call of a tool the agent does not hold is answered with an error and touches nothing.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, cast

from treadle.domain.content import ToolUseBlock
from treadle.domain.runs import NewEvent
from treadle.engine.agents import ResolvedAgent
from treadle.engine.outcomes import ParkedCall, tool_result_event
from treadle.errors import ToolError, ToolNotPermitted
from treadle.store.steps import LeasedRun, StepStore
from treadle.telemetry import tracing
from treadle.telemetry.metrics import NOT_PERMITTED, metrics
from treadle.tools.base import (
    Foldable,
    Park,
    Principal,
    Tool,
    ToolContext,
    ToolHooks,
    ToolResult,
    ToolServices,
    effects_of,
)

log = logging.getLogger("treadle.engine")

Outcome = NewEvent | ParkedCall


class ToolRaised(Exception):
    """The turn's only transactional call raised; its writes must be rolled back with the whole
    step transaction (no savepoint was taken — one round trip pair saved per step), and
    `outcome`, its error result, committed in a fresh one."""

    def __init__(self, tool_use_id: str, outcome: Outcome) -> None:
        super().__init__(tool_use_id)
        self.tool_use_id = tool_use_id
        self.outcome = outcome


@dataclass(slots=True)
class TurnCalls:
    """One step's tool calls, in the order the model made them."""

    leased: LeasedRun
    agent: ResolvedAgent
    uses: list[ToolUseBlock]
    iteration: int
    parked: dict[str, dict[str, Any]]
    #: the turn's `usage` payload when the turn is not recorded yet (committed with the results)
    turn_usage: dict[str, Any] | None = None
    #: a replay fork's calls answered from the original's results (engine/forkreplay.py): they run
    #: nothing, and commit with the step like transactional ones
    replayed: dict[str, NewEvent] = field(default_factory=dict)

    def tool(self, tu: ToolUseBlock) -> Tool | None:
        return self.agent.tools_by_name.get(tu.name)

    @property
    def external(self) -> list[ToolUseBlock]:
        return [tu for tu in self.uses if tu.id not in self.replayed and (t := self.tool(tu)) is not None
                and effects_of(t, tu.input) == "external"]

    @property
    def transactional(self) -> list[ToolUseBlock]:
        external = {tu.id for tu in self.external}
        return [tu for tu in self.uses if tu.id not in external and tu.id not in self.replayed]


class ToolRunner:
    def __init__(
        self, services: ToolServices, steps: StepStore, parallelism: int, hooks: ToolHooks | None = None
    ) -> None:
        self.services = services
        self.steps = steps
        self.parallelism = parallelism
        self.hooks = hooks

    async def run_external(self, calls: TurnCalls) -> dict[str, Outcome]:
        """Every external call, concurrently; no transaction is open."""
        uses = calls.external
        if not uses:
            return {}
        sem = asyncio.Semaphore(self.parallelism)

        async def bounded(tu: ToolUseBlock) -> Outcome:
            async with sem:
                return await self._call(calls, tu, savepoint=False)

        results = await asyncio.gather(*(bounded(tu) for tu in uses))
        return {tu.id: r for tu, r in zip(uses, results, strict=True)}

    async def run_transactional(self, calls: TurnCalls, *, fold: bool = True) -> dict[str, Outcome]:
        """Every transactional call, one by one, on the current step transaction (the caller holds
        it open): several each in a savepoint; a single one without (ToolRaised when it raises) —
        or, with `fold` and a tool that can, folded into the step's commit statement (its result is
        filled in by that statement; `count_folded` counts it once committed)."""
        uses = calls.transactional
        if len(uses) == 1:
            return {uses[0].id: await self._call(calls, uses[0], savepoint=None, fold=fold)}
        return {tu.id: await self._call(calls, tu, savepoint=True) for tu in uses}

    @staticmethod
    def count_folded(calls: TurnCalls, tool_use_id: str, outcomes: dict[str, Outcome]) -> None:
        """Count a folded call by its outcome, now that its commit filled in its result."""
        event = outcomes.get(tool_use_id)
        name = next((tu.name for tu in calls.uses if tu.id == tool_use_id), NOT_PERMITTED)
        if isinstance(event, NewEvent):
            metrics().tool_call(name, "error" if event.payload.get("is_error") else "ok")

    @staticmethod
    def in_order(calls: TurnCalls, *parts: dict[str, Outcome]) -> list[Outcome]:
        merged: dict[str, Outcome] = {**calls.replayed}
        merged.update((k, v) for part in parts for k, v in part.items())
        return [merged[tu.id] for tu in calls.uses]

    async def _call(self, calls: TurnCalls, tu: ToolUseBlock, *, savepoint: bool | None,
                    fold: bool = False) -> Outcome:
        """One call in its span (`execute_tool`), counted by tool and outcome; a name the agent
        does not hold is recorded as `(not permitted)`, never as what the model wrote. A folded
        call's outcome is known at the commit: its span says `folded`, `count_folded` counts it."""
        tool = calls.tool(tu)
        name = tu.name if tool is not None else NOT_PERMITTED
        outcome: str | None = "error"
        try:
            with tracing.tool_call(tool=name, call_id=tu.id, iteration=calls.iteration,
                                   effects=effects_of(tool, tu.input) if tool is not None else "none") as span:
                result = await self._run_call(calls, tu, savepoint=savepoint, fold=fold)
                if fold and self.steps.folded_id() == tu.id:
                    outcome = None
                    tracing.set_outcome(span, "folded")
                    return result
                outcome = "parked" if isinstance(result, ParkedCall) else (
                    "error" if result.payload.get("is_error") else "ok")
                tracing.set_outcome(span, outcome)
                return result
        finally:
            if outcome is not None:
                metrics().tool_call(name, outcome)

    async def _run_call(self, calls: TurnCalls, tu: ToolUseBlock, *, savepoint: bool | None,
                        fold: bool = False) -> Outcome:
        """`savepoint`: True — in a savepoint; False — outside any transaction (external); None —
        on the step transaction itself, raising ToolRaised when the tool raises, or (`fold`)
        folded into its commit statement when the tool can."""
        tool = calls.tool(tu)
        result: ToolResult | Park
        if tool is None:  # not in the agent's tools (never listed, narrowed away, or deleted since)
            held = ", ".join(calls.agent.tools_by_name) or "none"
            refused = ToolNotPermitted(
                f"tool {tu.name!r} is not permitted for agent {calls.agent.name!r} (its tools: {held})")
            result = ToolResult(refused.message, is_error=True)
        else:
            ctx = self._context(calls, tu)
            args, denied = tu.input, None
            if self.hooks is not None:  # the operator's pre-call hooks may rewrite or deny the call
                verdict = await self.hooks.pre(ctx, tu.name, args)
                args, denied = verdict.args, verdict.denied
            if denied is None and fold and savepoint is None and await self._fold(ctx, tool, tu, args):
                return tool_result_event(tu, "", False)  # the commit statement fills in the result
            result = denied if denied is not None else await self._invoke(ctx, tool, tu, args, savepoint)
            if isinstance(result, Park):
                if not result.keys:
                    result = ToolResult(f"{tu.name} parked without a wait key", is_error=True)
                else:
                    return ParkedCall(tu, result, calls.parked.get(tu.id))
            elif self.hooks is not None and denied is None:
                result = await self.hooks.post(ctx, tu.name, args, result)
        event = tool_result_event(tu, result.content, result.is_error)
        event.preceding = [NewEvent(t, p) for t, p in result.events]
        return event

    async def _fold(self, ctx: ToolContext, tool: Tool, tu: ToolUseBlock, args: dict[str, Any]) -> bool:
        """Hand the call to the step's commit statement (tools/base.py `Foldable`); False when
        the tool cannot fold it, a post-call hook would read its result, the input is bad (the
        call then reports that) or the transaction cannot carry it."""
        if not hasattr(tool, "fold") or (self.hooks is not None and await self.hooks.has_post(ctx, tu.name)):
            return False
        try:
            write = cast(Foldable, tool).fold(ctx, args)
        except ToolError:
            return False
        return write is not None and self.steps.fold(tu.id, write)

    def _context(self, calls: TurnCalls, tu: ToolUseBlock) -> ToolContext:
        leased, agent = calls.leased, calls.agent
        return ToolContext(
            principal=Principal(leased.tenant_id, leased.user_id),
            run_id=leased.run_id,
            tool_use_id=tu.id,
            iteration=calls.iteration,
            agent=leased.agent,
            agent_config=agent.config,
            services=self.services,
            model=agent.model,
            provider=agent.provider_id,
            resume=calls.parked.get(tu.id),
            def_id=leased.def_id,
            turn_usage=calls.turn_usage,
            allowed_hosts=leased.allowed_hosts,
            parent_context=leased.parent_context,
        )

    async def _invoke(
        self, ctx: ToolContext, tool: Tool, tu: ToolUseBlock, args: dict[str, Any], savepoint: bool | None
    ) -> ToolResult | Park:
        try:
            if not savepoint:
                return await tool.invoke(ctx, args)
            async with self.steps.savepoint():  # an exception rolls the call's writes back
                return await tool.invoke(ctx, args)
        except ToolError as exc:
            failed = ToolResult(exc.message, is_error=True)
        except Exception as exc:
            log.warning("tool %s raised %s", tu.name, exc, exc_info=True)
            failed = ToolResult(f"{tu.name} failed: {type(exc).__name__}: {exc}", is_error=True)
        if savepoint is None:
            raise ToolRaised(tu.id, tool_result_event(tu, failed.content, failed.is_error))
        return failed
