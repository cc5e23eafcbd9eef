"""One step of a run: lease → replay → (model call → record the assistant turn) → tools →
record the results → decide (next step / end_turn / max_iterations / cancelled / error).

Exactly-once rules (see engine/README.md):
- a step message whose `step_no` is stale, or whose run is leased by a live worker, is dropped;
- every write is fenced on (lease_owner, step_no); a worker that lost its lease writes nothing;
- the assistant turn is recorded before its tools run, so a step re-run after a crash finds the
  unanswered tool_uses and runs just those, never calling the model in between;
- results for one turn are committed together with the step advance; the database refuses a
  second result for a tool_use_id.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from treadle.domain.content import Block, Message, TextBlock, ThinkingBlock, ToolUseBlock
from treadle.domain.runs import NewEvent, StepMessage, StopReason
from treadle.domain.signals import CancelSignal
from treadle.engine.agents import Candidate, ResolvedAgent
from treadle.engine.cancelling import CancelWatch, StepInterrupted, interruptible
from treadle.engine.hub import RunEventHub
from treadle.engine.outcomes import ParkedCall, StepResult, tool_result_event
from treadle.engine.replay import Replayer, Transcript
from treadle.engine.routing import Call, RetryPolicy, call_route
from treadle.engine.scrub import scrub_key, scrub_messages
from treadle.engine.sending import StepSender
from treadle.engine.toolcalls import Outcome, ToolRaised, ToolRunner, TurnCalls
from treadle.engine.waiting import Steering, at_rest, iteration_cap
from treadle.errors import CancelPending, LeaseLost, ProviderError
from treadle.providers.base import DeltaSink, ModelResponse
from treadle.security.redact import SECRETS
from treadle.store.cancels import CancelState, cancel_state
from treadle.store.folding import FoldFailed
from treadle.store.steps import LeasedRun, StepOutcome, StepStore, WaitSpec
from treadle.telemetry import tracing
from treadle.telemetry.metrics import metrics
from treadle.tools.base import Tool, ToolHooks, ToolServices

log = logging.getLogger("treadle.engine")
T = TypeVar("T")

MAX_STEP_FAILURES = 5


@dataclass(slots=True)
class EngineSettings:
    tool_parallelism: int = 8
    provider_retries: int = 4
    #: at most this many steps of one run back to back under one lease chain before handing the
    #: next step to the dispatcher (1 = always hand off, one message per iteration)
    chain_steps: int = 1
    #: ... and stop chaining once the chain has run this long (fairness between runs)
    chain_budget_s: float = 0.5
    max_retry_wait_s: float = 10.0


#: the agent a leased step runs (substrate/resolve.py: the pinned AgentDef and skills), or None
AgentResolver = Callable[[LeasedRun], Awaitable[ResolvedAgent | None]]
#: the application tools a run's caller declared (builtins/client.py), as tools
ClientTools = Callable[[LeasedRun], list[Tool]]
#: the MCP servers' tools the agent's `tools:` select for this step (treadle/mcp/tools.py)
McpTools = Callable[[LeasedRun, ResolvedAgent], Awaitable[list[Tool]]]


class Engine:
    def __init__(
        self,
        *,
        steps: StepStore,
        agents: dict[str, ResolvedAgent],
        tools: ToolServices,
        sender: StepSender,
        steering: Steering,
        hub: RunEventHub,
        settings: EngineSettings | None = None,
        resolve_agent: AgentResolver | None = None,
        cancels: CancelWatch | None = None,
        client_tools: ClientTools | None = None,
        hooks: ToolHooks | None = None,
        mcp_tools: McpTools | None = None,
        on_run_end: Callable[[str], Awaitable[object]] | None = None,
    ) -> None:
        #: called (best effort) with a run's id after the step that ended it committed — unless
        #: that commit found no volume instances rooted at the run (`LeasedRun.rooted_volumes`)
        self.on_run_end = on_run_end
        self.tools = tools
        self.steps = steps
        self.agents = agents
        self.resolve_agent = resolve_agent
        self.sender = sender
        self.steering = steering
        self.hub = hub
        self.settings = settings or EngineSettings()
        self.runner = ToolRunner(tools, steps, self.settings.tool_parallelism, hooks)
        self.cancels = cancels
        self.client_tools = client_tools
        self.mcp_tools = mcp_tools
        self._signals: dict[str, CancelSignal] = {}
        self._owner_prefix = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self._owner_seq = itertools.count(1)

    def new_owner(self) -> str:
        """A lease token unique to one step attempt (workers in one process never share one)."""
        return f"{self._owner_prefix}:{next(self._owner_seq)}"

    # -- entry points ----------------------------------------------------------------------------

    async def handle(self, msg: StepMessage) -> StepResult:
        """Deliver one step message (any dispatcher)."""
        owner = self.new_owner()
        leased = await self.steps.lease(msg.run_id, msg.step_no, owner)
        if leased is None:
            return StepResult.DROPPED
        return await self.run_leased(leased, owner)

    async def run_leased(self, leased: LeasedRun, owner: str) -> StepResult:
        """Run the leased step — and, while chaining is allowed, the run's next steps under the
        lease the commit hands over (`StepOutcome.chain_owner`)."""
        leased.chain_deadline = time.monotonic() + self.settings.chain_budget_s
        if self.cancels is None:
            return await self._run_chain(leased, owner)
        async with self.cancels.watch(leased.run_id) as signal:
            self._signals[leased.run_id] = signal
            try:
                return await self._run_chain(leased, owner)
            finally:
                self._signals.pop(leased.run_id, None)

    async def _run_chain(self, leased: LeasedRun, owner: str) -> StepResult:
        while True:
            result = await self._run_one(leased, owner)
            if result is StepResult.FINISHED and leased.parent_wait_key:
                await self.steering.wake_parent(leased)  # a sub-agent ended: wake the parent's Agent call
            if result is StepResult.FINISHED and self.on_run_end is not None and leased.rooted_volumes:
                try:  # e.g. purge its ephemeral volumes; the sweeper repeats what fails here
                    await self.on_run_end(leased.run_id)
                except Exception:
                    log.exception("after the end of run %s", leased.run_id)
            elif result is StepResult.PARKED:
                await self.steering.cancel_if_requested(leased)  # a cancel that landed mid-step
            if result is not StepResult.CHAINED or leased.chain_owner is None:
                return result
            owner = leased.chain_owner

    async def _run_one(self, leased: LeasedRun, owner: str) -> StepResult:
        """The step inside its span (a child of the run's, telemetry/tracing.py), counted."""
        started = time.perf_counter()
        with tracing.step(run_id=leased.run_id, step_no=leased.step_no, tenant_id=leased.tenant_id,
                          agent=leased.agent, run_context=leased.trace_context, worker=self._owner_prefix) as span:
            result = await self._run_step(leased, owner)
            tracing.set_outcome(span, "error" if result is StepResult.RETRY_LATER else result.value)
        metrics().step(result.value, time.perf_counter() - started)
        if result is StepResult.FINISHED and leased.created_at is not None:
            metrics().run_finished((datetime.now(UTC) - leased.created_at).total_seconds())
        return result

    async def _run_step(self, leased: LeasedRun, owner: str) -> StepResult:
        renewer = asyncio.get_running_loop().call_later(
            self.steps.lease_s / 3, self._start_renewal, leased, owner
        )
        try:
            return await self._step(leased, owner)
        except LeaseLost as exc:
            log.warning("%s", exc)
            return StepResult.LEASE_LOST
        except (CancelPending, StepInterrupted) as exc:  # the cancel wins over what the step was doing
            try:
                return await self._cancelled_mid_step(leased, owner, exc)
            except LeaseLost as lost:
                log.warning("%s", lost)
                return StepResult.LEASE_LOST
        except Exception as exc:
            log.exception("step %s/%s crashed", leased.run_id, leased.step_no)
            return await self._step_crashed(leased, owner, exc)
        finally:
            renewer.cancel()
            self.hub.notify(leased.run_id)

    async def _interruptible(self, leased: LeasedRun, work: Awaitable[T]) -> T:
        """Await `work` (a model call, external tool calls) unless the run or its turn is cancelled
        meanwhile: then it is aborted and StepInterrupted raised."""

        async def check() -> CancelState:
            return await cancel_state(self.steps.pool, leased.run_id)

        return await interruptible(work, self._signals.get(leased.run_id), check)

    async def _stop_if_cancelled(self, leased: LeasedRun) -> None:
        """StepInterrupted when the run's cancel signal has fired and a cancel is pending (no query
        unless the signal fired)."""
        signal = self._signals.get(leased.run_id)
        if signal is not None and signal.is_set():
            state = await cancel_state(self.steps.pool, leased.run_id)
            if state.any:
                raise StepInterrupted(state)
            signal.clear()

    async def _cancelled_mid_step(self, leased: LeasedRun, owner: str, exc: Exception) -> StepResult:
        """A cancel landed while the step worked: a run cancel ends the run (pending calls answered
        "cancelled"); a turn cancel ends the turn, as the steering queue does at a step's top."""
        if isinstance(exc, StepInterrupted) and not exc.state.cancel_requested:
            steered = await self.steering.take_inputs(leased, owner, self._transcript(leased))
            if steered.result is not None:
                return steered.result
            return await self._step(leased, owner)  # the queue held input only: go on with it
        if isinstance(exc, StepInterrupted):
            leased.cancel_requested, leased.cancel_reason = True, exc.state.cancel_reason
        return await self._finish_cancelled(leased, owner, self._transcript(leased))

    # -- the step ----------------------------------------------------------------------------------

    async def _agent_for(self, leased: LeasedRun) -> ResolvedAgent | None:
        """The agent a step runs: through the runtime's resolver (the AgentDef and skills the run
        was pinned to at start, see substrate/resolve.py), else the treadle.yaml agent."""
        agent = await self.resolve_agent(leased) if self.resolve_agent is not None else self.agents.get(leased.agent)
        narrowed = (leased.run_options or {}).get("tools")
        if agent is not None and isinstance(narrowed, list):  # the caller's `tools`: ∩ the agent's
            agent = dataclasses.replace(agent, tools=[t for t in agent.tools if t.name in narrowed])
        if agent is not None and leased.client_tools and self.client_tools is not None:
            agent = dataclasses.replace(agent, tools=[*agent.tools, *self.client_tools(leased)])
        if agent is not None and self.mcp_tools is not None and any(t.startswith("mcp__") for t in agent.config.tools):
            agent = dataclasses.replace(agent, tools=[*agent.tools, *await self.mcp_tools(leased, agent)])
        return agent

    @staticmethod
    def _transcript(leased: LeasedRun) -> Transcript:
        """`replay(leased.events)`, fed incrementally: a chained step's commit appended its events
        to `leased.events`, and the replay state kept on `leased` takes just those (issue 12: a
        worker that chains steps keeps the transcript it holds). A list that no longer extends
        what was fed (re-read) is replayed from its start."""
        events, r = leased.events, leased.replayed
        if not isinstance(r, Replayer) or r.fed > len(events) or (r.fed and events[r.fed - 1][0] != r.last_seq):
            r = leased.replayed = Replayer()
        return r.feed(events[r.fed:]).transcript()

    async def _step(self, leased: LeasedRun, owner: str) -> StepResult:
        if leased.events_stale:
            await self.steps.reload_events(leased)
        transcript = self._transcript(leased)
        agent = await self._agent_for(leased)

        if leased.cancel_requested:
            return await self._finish_cancelled(leased, owner, transcript)
        deadline = (leased.run_options or {}).get("deadline_unix")  # loomcycle's run_timeout_seconds
        if isinstance(deadline, (int, float)) and time.time() >= deadline:
            return await self._finish_failed(leased, owner, [], "run_timeout", "run timeout exceeded")
        if agent is None:
            return await self._finish_failed(
                leased, owner, [], "unknown_agent", f"agent {leased.agent!r} is not configured"
            )
        if leased.input_seq > transcript.consumed_input_id:  # steering input / a turn cancel queued
            steered = await self.steering.take_inputs(leased, owner, transcript)
            if steered.result is not None:
                return steered.result
            transcript = steered.transcript
        elif at_rest(leased):  # an interactive run woken with no input: park again
            return await self.steering.park_for_input(leased, owner, [])
        if transcript.pending:  # parked calls being woken, or a crash between a turn and its results
            calls = TurnCalls(leased, agent, transcript.pending, transcript.iterations, transcript.parked)
            # the crashed attempt appended its turn but never committed the run row's counters
            behind = transcript.iterations > leased.iterations
            return await self._tools_and_commit(
                leased, owner, calls, [], usage=_last_turn_usage(leased.events) if behind else None,
                new_iteration=behind,
            )
        if transcript.iterations >= iteration_cap(agent, leased):
            return await self._finish(leased, owner, [], transcript, StopReason.MAX_ITERATIONS)

        iteration = transcript.iterations + 1
        retry_events: list[NewEvent] = []
        try:
            response = await self._interruptible(
                leased, self._call_model(leased, agent, transcript, iteration, retry_events)
            )
        except ProviderError as exc:
            return await self._finish_failed(leased, owner, retry_events, exc.code, exc.message, exc.details)

        turn = retry_events + _assistant_events(response, iteration)
        tool_uses = [b for b in response.content if isinstance(b, ToolUseBlock)]
        usage = response.usage.to_json()
        if not tool_uses and leased.interactive:  # end of turn: park for the next input
            return await self.steering.park_for_input(leased, owner, turn, usage=usage, delta=1)
        if not tool_uses:
            late = await self.steering.take_late_input(leased, owner, turn, usage=usage)
            if late is not None:
                return late  # input was queued while the model answered: it is the next user turn
            totals = _add_usage(transcript.usage, usage)
            done = NewEvent("done", {"stop_reason": StopReason.END_TURN.value, "usage": totals})
            await self.steps.commit(
                leased,
                owner,
                [*turn, done],
                StepOutcome("completed", StopReason.END_TURN.value, iterations_delta=1, usage=usage),
            )
            return StepResult.FINISHED

        transcript.usage = _add_usage(transcript.usage, usage)
        turn_usage: dict[str, Any] = dict(response.usage.to_json())
        if response.max_context_tokens:
            turn_usage["max_context_tokens"] = response.max_context_tokens
        calls = TurnCalls(leased, agent, tool_uses, iteration, {}, turn_usage)
        return await self._tools_and_commit(leased, owner, calls, turn, usage=usage, new_iteration=True,
                                            totals=transcript.usage)

    async def _tools_and_commit(
        self,
        leased: LeasedRun,
        owner: str,
        calls: TurnCalls,
        turn: list[NewEvent],
        *,
        usage: dict[str, int] | None,
        new_iteration: bool,
        totals: dict[str, int] | None = None,
    ) -> StepResult:
        """Run the turn's calls and commit the step. With external calls the turn (`turn`, not yet
        recorded) is appended first and those calls run outside any transaction; the transactional
        calls then run inside the step's commit transaction, so their writes, the results and the
        step advance commit together — one commit per iteration when every call is transactional."""
        external: dict[str, Outcome] = {}
        if calls.external:
            if turn:
                await self.steps.append(leased, owner, turn)
                self.hub.notify(leased.run_id)
                turn = []
            external = await self._interruptible(leased, self.runner.run_external(calls))
        await self._stop_if_cancelled(leased)  # before any transactional effect

        async def commit(transactional: dict[str, Outcome]) -> StepResult:
            outcomes = self.runner.in_order(calls, external, transactional)
            return await self._decide(leased, owner, calls.agent, calls.iteration, outcomes, usage=usage,
                                      new_iteration=new_iteration, totals=totals, turn=turn)

        fold = True
        while True:
            try:
                async with self.steps.transaction() as tx:
                    transactional = await self.runner.run_transactional(calls, fold=fold)
                    result = await commit(transactional)
                if tx.folded is not None:
                    self.runner.count_folded(calls, tx.folded.tool_use_id, transactional)
                return result
            except FoldFailed as failed:  # rolled back: run the call as an ordinary one (it reports the error)
                log.warning("step %s/%s: %s; running the call instead", leased.run_id, leased.step_no, failed)
                fold = False
            except ToolRaised as raised:  # its writes rolled back with that transaction: commit its error alone
                async with self.steps.transaction():
                    return await commit({raised.tool_use_id: raised.outcome})

    async def _decide(
        self,
        leased: LeasedRun,
        owner: str,
        agent: ResolvedAgent,
        iteration: int,
        outcomes: list[NewEvent | ParkedCall],
        *,
        usage: dict[str, int] | None = None,
        new_iteration: bool = False,
        totals: dict[str, int] | None = None,
        turn: list[NewEvent] | None = None,
    ) -> StepResult:
        """`turn`: the assistant turn when it is committed with its results (not appended before)."""
        delta = 1 if new_iteration else 0
        turn = turn or []
        if any(isinstance(o, ParkedCall) for o in outcomes):
            return await self._park(leased, owner, iteration, outcomes, usage=usage, delta=delta, turn=turn)
        results = [*turn, *(e for o in outcomes if isinstance(o, NewEvent) for e in o.flattened())]
        if iteration >= iteration_cap(agent, leased):
            if totals is None:
                totals = self._transcript(leased).usage
            done = NewEvent("done", {"stop_reason": StopReason.MAX_ITERATIONS.value, "usage": totals})
            await self.steps.commit(
                leased,
                owner,
                [*results, done],
                StepOutcome("completed", StopReason.MAX_ITERATIONS.value, iterations_delta=delta, usage=usage),
            )
            return StepResult.FINISHED
        chain_owner = self._next_chain_owner(leased)
        next_step = await self.steps.commit(
            leased,
            owner,
            results,
            StepOutcome(
                "running", iterations_delta=delta, usage=usage, enqueue_next=chain_owner is None,
                chain_owner=chain_owner,
            ),
        )
        if chain_owner is not None:
            return StepResult.CHAINED
        await self.sender.next_step(leased.run_id, next_step)
        return StepResult.CONTINUED

    async def _park(
        self,
        leased: LeasedRun,
        owner: str,
        iteration: int,
        outcomes: list[NewEvent | ParkedCall],
        *,
        usage: dict[str, int] | None,
        delta: int,
        turn: list[NewEvent],
    ) -> StepResult:
        """Commit the results that are in, a `tool_parked` record per parked call, and the waits;
        the run becomes `waiting` and holds no worker. A poke that raced the tool's check turns
        the park into an ordinary next step."""
        events: list[NewEvent] = list(turn)
        waits: list[WaitSpec] = []
        now = time.time()
        for o in outcomes:
            if isinstance(o, NewEvent):
                events.extend(o.flattened())
                continue
            tu, park = o.tool_use, o.park
            first = o.resume or {}
            deadline = first.get("deadline")
            if deadline is None and park.deadline_s is not None:
                deadline = now + park.deadline_s
            wait = {"kind": park.kind, "keys": sorted(park.keys), "deadline": deadline, "extra": park.extra}
            events.extend(NewEvent(t, p) for t, p in park.events)
            events.append(
                NewEvent(
                    "tool_parked",
                    {"tool_use": {"id": tu.id, "name": tu.name, "input": tu.input}, "wait": wait,
                     "iteration": iteration},
                )
            )
            waits.extend(WaitSpec(tu.id, park.kind, k, v, deadline) for k, v in park.keys.items())
        outcome = StepOutcome("waiting", iterations_delta=delta, usage=usage, waits=waits)
        next_step = await self.steps.commit(leased, owner, events, outcome)
        if outcome.waits:
            return StepResult.PARKED
        await self.sender.next_step(leased.run_id, next_step)
        return StepResult.CONTINUED

    def _next_chain_owner(self, leased: LeasedRun) -> str | None:
        if leased.chained + 1 >= self.settings.chain_steps or time.monotonic() >= leased.chain_deadline:
            return None
        return self.new_owner()

    # -- model ---------------------------------------------------------------------------------------

    async def _call_model(
        self,
        leased: LeasedRun,
        agent: ResolvedAgent,
        transcript: Transcript,
        iteration: int,
        retry_events: list[NewEvent],
    ) -> ModelResponse:
        """Call the agent's model through its route (engine/routing.py): in-step retries, then
        the next tier candidate. `retry`/`provider_fallback`/… events land in `retry_events`,
        which the caller persists whatever the outcome. Text deltas go to live subscribers."""
        cfg = agent.config
        system = cfg.system_prompt
        if transcript.system_extra:
            system = f"{system}\n\n{transcript.system_extra}" if system else transcript.system_extra
        if leased.metadata:
            meta = json.dumps(leased.metadata, sort_keys=True)
            system = f"{system}\n\nRun metadata (operator-authored, trusted):\n{meta}".lstrip()
        assert agent.route is not None
        call = Call(
            run_id=leased.run_id,
            agent=leased.agent,
            iteration=iteration,
            system=SECRETS.scrub_text(system),
            messages=self._scrubbed(leased, transcript),
            request={"tools": agent.tool_specs, "max_tokens": cfg.max_tokens, "options": {
                "mock": cfg.mock, **(cfg.sampling.model_dump(exclude_none=True) if cfg.sampling else {}),
                **({"effort": cfg.effort} if cfg.effort else {}),
                **((leased.run_options or {}).get("sampling") or {})}},  # loomcycle's sampling: the run's wins
            history=leased.events,
            tool_ids=transcript.tool_ids,
            has_thinking=transcript.has_thinking,
        )
        policy = RetryPolicy(retries=self.settings.provider_retries, max_wait_s=self.settings.max_retry_wait_s)
        return await call_route(agent.route, call, policy, retry_events, self._delta_sink(leased.run_id, iteration))

    @staticmethod
    def _scrubbed(leased: LeasedRun, transcript: Transcript) -> list[Message]:
        """The outbound scrub of the transcript's messages; along a lease chain only the messages
        that are new since the last step are scrubbed (the rest is remembered by the replay state)."""
        if isinstance(leased.replayed, Replayer):
            return leased.replayed.scrubbed(transcript, scrub_key(), scrub_messages)
        return scrub_messages(transcript.messages)

    def _delta_sink(self, run_id: str, iteration: int) -> Callable[[Candidate, int], DeltaSink | None]:
        """Live `text_delta`/`thinking_delta` frames for the run's SSE readers (never persisted)."""
        hub = self.hub

        def factory(cand: Candidate, attempt: int) -> DeltaSink:
            async def sink(kind: str, delta: str) -> None:
                if hub.has_live(run_id):
                    hub.publish(
                        run_id,
                        f"{kind}_delta",
                        {"text": delta, "iteration": iteration, "attempt": attempt, "provider": cand.provider_id},
                    )

            return sink

        return factory

    # -- endings --------------------------------------------------------------------------------------

    async def _finish(
        self,
        leased: LeasedRun,
        owner: str,
        events: list[NewEvent],
        transcript: Transcript,
        reason: StopReason,
    ) -> StepResult:
        done = NewEvent("done", {"stop_reason": reason.value, "usage": transcript.usage})
        await self.steps.commit(leased, owner, [*events, done], StepOutcome("completed", reason.value))
        return StepResult.FINISHED

    async def _finish_cancelled(self, leased: LeasedRun, owner: str, transcript: Transcript) -> StepResult:
        why = leased.cancel_reason or "cancelled by api"
        events = [tool_result_event(tu, f"cancelled: {why}", True) for tu in transcript.pending]
        events.append(
            NewEvent("done", {"stop_reason": StopReason.CANCELLED.value, "reason": why, "usage": transcript.usage})
        )
        await self.steps.commit(leased, owner, events, StepOutcome("cancelled", StopReason.CANCELLED.value))
        return StepResult.FINISHED

    async def _finish_failed(
        self,
        leased: LeasedRun,
        owner: str,
        events: list[NewEvent],
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> StepResult:
        transcript = self._transcript(leased)
        closing = [tool_result_event(tu, f"run failed: {message}", True) for tu in transcript.pending]
        error: dict[str, Any] = {**(details or {}), "code": code, "error": message}
        await self.steps.commit(
            leased,
            owner,
            [*events, *closing, NewEvent("error", error)],
            StepOutcome("failed", StopReason.ERROR.value, error=error),
        )
        return StepResult.FINISHED

    async def _step_crashed(self, leased: LeasedRun, owner: str, exc: Exception) -> StepResult:
        try:
            if leased.step_failures + 1 >= MAX_STEP_FAILURES:
                await self._finish_failed(
                    leased,
                    owner,
                    [],
                    "internal_error",
                    f"step failed {MAX_STEP_FAILURES} times; last error: {type(exc).__name__}: {exc}",
                )
                return StepResult.FINISHED
            backoff = min(30.0, 0.5 * 2**leased.step_failures)
            await self.steps.release_after_failure(leased, owner, backoff)
        except Exception:
            log.exception("could not hand back step %s/%s; the sweeper will", leased.run_id, leased.step_no)
        return StepResult.RETRY_LATER

    # -- lease renewal ----------------------------------------------------------------------------

    def _start_renewal(self, leased: LeasedRun, owner: str) -> None:
        task = asyncio.ensure_future(self._renew(leased, owner))
        task.add_done_callback(lambda _t: None)

    async def _renew(self, leased: LeasedRun, owner: str) -> None:
        try:
            if await self.steps.renew(leased, owner):
                asyncio.get_running_loop().call_later(
                    self.steps.lease_s / 3, self._start_renewal, leased, owner
                )
        except Exception as exc:  # the commit's fence is the authority; renewal is best effort
            log.warning("lease renewal for %s failed: %s", leased.run_id, exc)


def _assistant_events(response: ModelResponse, iteration: int) -> list[NewEvent]:
    events: list[NewEvent] = []
    text_parts: list[str] = []
    block: Block
    for block in response.content:
        if isinstance(block, ThinkingBlock):
            thinking: dict[str, object] = {"text": block.thinking, "signature": block.signature, "iteration": iteration}
            if block.source:
                thinking["source"] = block.source
            events.append(NewEvent("thinking", thinking))
        elif isinstance(block, TextBlock):
            text_parts.append(block.text)
    if text_parts:
        events.append(NewEvent("text", {"text": "".join(text_parts), "iteration": iteration}))
    for block in response.content:
        if isinstance(block, ToolUseBlock):
            events.append(
                NewEvent(
                    "tool_call",
                    {"tool_use": {"id": block.id, "name": block.name, "input": block.input}, "iteration": iteration},
                )
            )
    usage: dict[str, object] = dict(response.usage.to_json(), model=response.model, provider=response.provider)
    if response.max_context_tokens:
        usage["max_context_tokens"] = response.max_context_tokens
    events.append(NewEvent("usage", {"usage": usage, "iteration": iteration}))
    return events


def _last_turn_usage(events: list[tuple[int, str, dict[str, Any]]]) -> dict[str, int]:
    """The token counts of the last recorded `usage` event (the turn a crashed step appended)."""
    for _seq, etype, payload in reversed(events):
        if etype == "usage":
            usage = payload.get("usage") or {}
            return {k: v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}
    return {}


def _add_usage(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}
