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
import functools
import itertools
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from treadle.config import CODE_JS, AgentConfig
from treadle.domain.content import Block, Message, TextBlock, ThinkingBlock, ToolUseBlock
from treadle.domain.events import DELTA_OF, ContextCompaction, EventType, Text, Thinking, ToolCall, ToolUseRef, Usage
from treadle.domain.runs import NewEvent, StepMessage, StopReason
from treadle.domain.signals import CancelSignal
from treadle.engine import compaction, forkreplay, plan
from treadle.engine.agents import ResolvedAgent
from treadle.engine.cancelling import CancelWatch, StepInterrupted, interruptible
from treadle.engine.history import SessionHistories
from treadle.engine.hub import RunEventHub
from treadle.engine.lease import Lease
from treadle.engine.model_routes import Candidate
from treadle.engine.outcomes import StepResult
from treadle.engine.plan import Next, StepPlan
from treadle.engine.replay import Replayer, Transcript
from treadle.engine.routing import Call, RetryPolicy, call_route
from treadle.engine.scrub import scrub_key, scrub_messages
from treadle.engine.sending import StepSender
from treadle.engine.slots import slot_loan
from treadle.engine.toolcalls import Outcome, ToolRaised, ToolRunner, TurnCalls
from treadle.engine.waiting import Steering
from treadle.errors import AgentGone, CancelPending, LeaseLost, ProviderError, TreadleError
from treadle.governance.budgets import Breach, Verdict
from treadle.providers.base import RUN_PROVIDER_KEYS, DeltaSink, ModelResponse
from treadle.providers.codejs import CODE_AGENT_CANCELLED
from treadle.security.redact import SECRETS
from treadle.store.cancels import CancelState, cancel_state
from treadle.store.folding import FoldFailed
from treadle.store.pause import PAUSE_KEY, PauseStore
from treadle.store.steps import LeasedRun, StepStore
from treadle.telemetry import tracing
from treadle.telemetry.metrics import metrics
from treadle.tools.base import Principal, Tool, ToolContext, ToolHooks, ToolServices

log = logging.getLogger("treadle.engine")
runs_log = logging.getLogger("treadle.runs")  # (runtime.py logs the starts)
T = TypeVar("T")

MAX_STEP_FAILURES = 5
#: how long a step waits on its model or external tools before it gives its connection and its
#: worker slot back (engine/slots.py, store/db.py `Pool.released`)
HOLD_ACROSS_S = 0.005


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
#: the run's budgets now (governance/limits.py `LimitStore.verdict`); None: no limit binds it
BudgetCheck = Callable[[LeasedRun], Awaitable[Verdict | None]]
#: provider id → the run's tenant credential value for that provider (runtime.py)
ProviderKeys = Callable[[LeasedRun], Awaitable[Mapping[str, str]]]


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
        budgets: BudgetCheck | None = None,
        pause: PauseStore | None = None,
        provider_keys: ProviderKeys | None = None,
        remember_secrets: Callable[[str], Awaitable[None]] | None = None,
        render_prompt: Callable[[str, ToolContext], Awaitable[str]] | None = None,
    ) -> None:
        #: expands loomcycle's `{{tool:Context.…}}` placeholders of a system prompt (builtins/promptrefs.py)
        self.render_prompt = render_prompt
        #: called with a step's tenant before the step: its CredentialDef values join this process's
        #: redaction set (governance/credentials.py `remember_tenant`; cached per tenant)
        self.remember_secrets = remember_secrets
        #: the run's tenant credentials for the providers that reference one (`api_key:
        #: ${credential.NAME}`), resolved once per step and handed to the drivers in a context
        #: variable (providers/base.py RUN_PROVIDER_KEYS): in no request, event, log or span
        self.provider_keys = provider_keys
        #: consulted at each step's top (the iteration boundary): a spent hard budget ends the run
        self.budgets = budgets
        #: the runtime's pause state (store/pause.py): re-read before a run parks for a pause
        self.pause = pause
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
        self._renewals: set[asyncio.Future[None]] = set()
        self._owner_prefix = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self._owner_seq = itertools.count(1)
        #: run id → its session history (`_session_history`), oldest entry evicted first
        self.histories = SessionHistories(steps)

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
        lease each commit hands over (`Committed.chain_owner`)."""
        return await self.run_lease(self.lease_of(leased, owner))

    def lease_of(self, leased: LeasedRun, owner: str) -> Lease:
        """The engine's state of a lease chain starting now (engine/lease.py)."""
        return Lease.of(leased, owner, time.monotonic() + self.settings.chain_budget_s)

    async def run_lease(self, lease: Lease) -> StepResult:
        """`run_leased` with the chain's state in the caller's hands (its token after a chained
        commit is `lease.owner`)."""
        leased = lease.run
        if self.cancels is None:
            return await self._run_chain(lease)
        async with self.cancels.watch(leased.run_id) as signal:
            self._signals[leased.run_id] = signal
            try:
                return await self._run_chain(lease)
            finally:
                self._signals.pop(leased.run_id, None)

    async def _run_chain(self, lease: Lease) -> StepResult:
        leased = lease.run
        while True:
            result = await self._run_one(lease)
            if result is StepResult.FINISHED and leased.parent_wait_key:
                await self.steering.wake_parent(leased)  # a sub-agent ended: wake the parent's Agent call
            if result is StepResult.FINISHED and self.on_run_end is not None and lease.rooted_volumes:
                try:  # e.g. purge its ephemeral volumes; the sweeper repeats what fails here
                    await self.on_run_end(leased.run_id)
                except Exception:
                    log.exception("after the end of run %s", leased.run_id)
            elif result is StepResult.PARKED:
                await self.steering.cancel_if_requested(leased)  # a cancel that landed mid-step
            if result is not StepResult.CHAINED:
                return result

    async def _run_one(self, lease: Lease) -> StepResult:
        """The step inside its span (a child of the run's, telemetry/tracing.py), counted."""
        leased = lease.run
        started = time.perf_counter()
        with tracing.step(run_id=leased.run_id, step_no=leased.step_no, tenant_id=leased.tenant_id,
                          agent=leased.agent, run_context=leased.trace_context, worker=self._owner_prefix) as span:
            result = await self._run_step(lease)
            tracing.set_outcome(span, "error" if result is StepResult.RETRY_LATER else result.value)
        metrics().step(result.value, time.perf_counter() - started)
        if result is StepResult.FINISHED and leased.created_at is not None:
            lasted = (datetime.now(UTC) - leased.created_at).total_seconds()
            metrics().run_finished(lasted, lease.ended or "ended")
            totals = lease.totals
            runs_log.info("run %s ended: status=%s agent=%s tenant=%s steps=%d iterations=%s tokens_in=%s "
                          "tokens_out=%s duration_s=%.3f", leased.run_id, lease.ended or "ended", leased.agent,
                          leased.tenant_id, leased.step_no + 1, totals.iterations if totals else "?",
                          totals.tokens_in if totals else "?", totals.tokens_out if totals else "?", lasted)
        return result

    async def _run_step(self, lease: Lease) -> StepResult:
        leased = lease.run
        renewer = asyncio.get_running_loop().call_later(
            self.steps.lease_s / 3, self._start_renewal, leased, lease.owner
        )
        keys = None
        try:
            if self.remember_secrets is not None:
                await self.remember_secrets(leased.tenant_id)
            if self.provider_keys is not None:
                keys = RUN_PROVIDER_KEYS.set(await self._provider_keys(leased))
            return await self._step(lease)
        except LeaseLost as exc:
            log.warning("%s", exc)
            return StepResult.LEASE_LOST
        except (CancelPending, StepInterrupted) as exc:  # the cancel wins over what the step was doing
            try:
                return await self._cancelled_mid_step(lease, exc)
            except LeaseLost as lost:
                log.warning("%s", lost)
                return StepResult.LEASE_LOST
        except Exception as exc:
            log.exception("step %s/%s crashed", leased.run_id, leased.step_no)
            return await self._step_crashed(lease, exc)
        finally:
            if keys is not None:
                RUN_PROVIDER_KEYS.reset(keys)
            renewer.cancel()
            self.hub.notify(leased.run_id)

    async def _provider_keys(self, leased: LeasedRun) -> Mapping[str, str]:
        """The run's provider credentials; none when they cannot be read (the driver then says the
        credential is missing, or uses the operator's key)."""
        assert self.provider_keys is not None
        try:
            return await self.provider_keys(leased)
        except TreadleError as exc:
            log.warning("run %s: provider credentials unavailable: %s", leased.run_id, exc.message)
            return {}

    async def _interruptible(self, lease: Lease, work: Awaitable[T]) -> T:
        """Await `work` (a model call, external tool calls) unless the run or its turn is cancelled
        meanwhile: then it is aborted and StepInterrupted raised."""

        run_id = lease.run.run_id

        async def check() -> CancelState:
            return await cancel_state(self.steps.pool, run_id)

        # nothing held while the model or the tools answer: no connection, no worker slot (a wait
        # that ends within HOLD_ACROSS_S keeps both: an instant answer costs no hand-over)
        loan = slot_loan()  # (one timer gives back both)
        async with self.steps.released(HOLD_ACROSS_S, also=loan.give_back if loan is not None else None):
            try:
                return await interruptible(work, self._signals.get(run_id), check)
            finally:
                if loan is not None:
                    await loan.take_back()

    async def _stop_if_cancelled(self, leased: LeasedRun) -> None:
        """StepInterrupted when the run's cancel signal has fired and a cancel is pending (no query
        unless the signal fired)."""
        signal = self._signals.get(leased.run_id)
        if signal is not None and signal.is_set():
            state = await cancel_state(self.steps.pool, leased.run_id)
            if state.any:
                raise StepInterrupted(state)
            signal.clear()

    async def _cancelled_mid_step(self, lease: Lease, exc: Exception) -> StepResult:
        """A cancel landed while the step worked: a run cancel ends the run (pending calls answered
        "cancelled"); a turn cancel ends the turn, as the steering queue does at a step's top."""
        leased = lease.run
        if isinstance(exc, StepInterrupted) and not exc.state.cancel_requested:
            steered = await self._steer(lease, self._transcript(lease))
            if isinstance(steered, StepPlan):
                return await self._apply(lease, steered)
            return await self._step(lease)  # the queue held input only: go on with it
        code: str | None = None
        if isinstance(exc, StepInterrupted):
            leased.cancel_requested, leased.cancel_reason = True, exc.state.cancel_reason
            code = exc.code
        elif isinstance(exc, CancelPending):
            leased.cancel_requested, leased.cancel_reason = True, exc.reason or None
        return await self._apply(lease, plan.cancelled(self._transcript(lease), leased.cancel_reason, code))

    # -- the step ----------------------------------------------------------------------------------

    async def _agent_for(self, leased: LeasedRun) -> ResolvedAgent | None:
        """The agent a step runs: through the runtime's resolver (the AgentDef and skills the run
        was pinned to at start, see substrate/resolve.py), else the treadle.yaml agent."""
        agent = await self.resolve_agent(leased) if self.resolve_agent is not None else self.agents.get(leased.agent)
        narrowed = leased.run_options.tools
        if agent is not None and narrowed is not None:  # the caller's `tools`: ∩ the agent's
            agent = dataclasses.replace(agent, tools=[t for t in agent.tools if t.name in narrowed])
        if agent is not None and leased.client_tools and self.client_tools is not None:
            agent = dataclasses.replace(agent, tools=[*agent.tools, *self.client_tools(leased)])
        external = ("mcp__", "a2a__")  # MCP servers' and A2A peers' tools: the runtime's hook lists them
        if agent is not None and self.mcp_tools is not None and any(t.startswith(external) for t in agent.config.tools):
            agent = dataclasses.replace(agent, tools=[*agent.tools, *await self.mcp_tools(leased, agent)])
        return agent

    @staticmethod
    def _transcript(lease: Lease) -> Transcript:
        """`replay(leased.events)`, fed incrementally: a chained step's commit appended its events
        to `leased.events`, and the replay state kept on `leased` takes just those (issue 12: a
        worker that chains steps keeps the transcript it holds). A list that no longer extends
        what was fed (re-read) is replayed from its start."""
        events, r = lease.run.events, lease.replayer
        if r is None or r.fed > len(events) or (r.fed and events[r.fed - 1][0] != r.last_seq):
            r = lease.replayer = Replayer(lease.history)
        return r.feed(events[r.fed:]).transcript()

    @staticmethod
    def _facts(leased: LeasedRun, agent: ResolvedAgent | None, budget: Verdict | None = None) -> plan.Facts:
        return plan.Facts(
            cancel_requested=leased.cancel_requested,
            cancel_reason=leased.cancel_reason,
            deadline_unix=_deadline(leased, agent),
            agent_known=agent is not None,
            agent_name=leased.agent,
            input_seq=leased.input_seq,
            interactive=leased.interactive,
            at_rest=plan.at_rest(leased.interactive, leased.events),
            iteration_cap=iteration_cap(agent, leased) if agent is not None else 0,
            over_budget=budget.hard if budget is not None else None,
            soft_budget=budget.soft if budget is not None else (),
            runtime_paused=leased.runtime_paused,
        )

    async def _step(self, lease: Lease) -> StepResult:
        """Gather the facts, let the deciders (engine/plan.py) plan, apply the plan."""
        leased = lease.run
        if lease.stale:
            lease.reloaded(await self.steps.reload_events(leased.run_id))
        if leased.session_seq and lease.history is None:
            lease.history = await self._session_history(leased)
        transcript = self._transcript(lease)
        agent = await self._agent_for(leased)
        budget = await self.budgets(leased) if self.budgets is not None else None
        facts = self._facts(leased, agent, budget)
        decision = plan.top(facts, transcript, time.time())
        if decision is Next.PAUSE:  # the runtime is pausing: park here unless it resumed meanwhile
            version = await self.tools.waits.version(leased.tenant_id, PAUSE_KEY)  # before the state
            if self.pause is not None and await self.pause.paused():
                return await self._apply(lease, plan.pause(transcript.iterations, version))
            leased.runtime_paused = False
            facts = self._facts(leased, agent)
            decision = plan.top(facts, transcript, time.time())
        if decision is Next.STEER:  # steering input / a turn cancel queued
            steered = await self._steer(lease, transcript)
            if isinstance(steered, StepPlan):
                return await self._apply(lease, steered)
            transcript = steered
            decision = plan.after_steering(facts, transcript)
        elif decision is Next.REST:  # an interactive run woken with no input: park again
            inputs = await self.steering.input_facts(leased)
            return await self._apply(lease, plan.park_for_input(
                leased.run_id, [], transcript.consumed_input_id, leased.iterations, inputs,
                wake=plan.resident_wake(leased.interactive, leased.parent_wait_key)))
        if isinstance(decision, StepPlan):
            if facts.over_budget is not None and decision.outcome.stop_reason == StopReason.BUDGET_EXCEEDED:
                metrics().budget_crossed(facts.over_budget.limit.scope, "hard")
            return await self._apply(lease, decision)
        assert agent is not None  # `top` ends a run whose agent is unknown
        if decision is Next.PENDING:  # parked calls being woken, or a crash between a turn and its results
            calls = TurnCalls(leased, agent, transcript.pending, transcript.iterations, transcript.parked)
            # the crashed attempt appended its turn but never committed the run row's counters
            behind = transcript.iterations > leased.iterations
            return await self._tools_and_commit(
                lease, calls, [], usage=_last_turn_usage(leased.events) if behind else None,
                new_iteration=behind,
            )
        settings = _lease_compaction(lease, agent)
        trigger = plan.compaction_due(settings, transcript)
        if trigger is not None:
            done = await self._compact(lease, agent, transcript, settings, trigger)
            if done is not None:
                return done
        return await self._model_turn(lease, agent, transcript, facts.soft_budget)

    async def _compact(self, lease: Lease, agent: ResolvedAgent, transcript: Transcript,
                       settings: compaction.Settings, trigger: str) -> StepResult | None:
        """Summarize the older turns (one model call, no tools) and commit the `context_compaction`
        event as this step; None when there is nothing to summarize (the model is called as usual)."""
        todo = compaction.plan(transcript.messages, settings, transcript.context_window)
        if todo is None:
            return None
        iteration = transcript.iterations + 1
        try:
            caller = (lease.run.run_id, lease.run.agent)
            summary = await self._interruptible(
                lease, self.summarize(caller, agent, todo.span, settings, iteration, lease.run.events))
        except ProviderError as exc:
            return await self._apply(lease, plan.compaction_failed(trigger, iteration, f"summary: {exc.message}"))
        if not summary:
            return await self._apply(lease, plan.compaction_failed(trigger, iteration,
                                                                   "summary: the model wrote nothing"))
        event = ContextCompaction(summary, todo.keep_n, todo.keep_first, todo.before_tokens,
                                  compaction.after_tokens(todo, summary), trigger, iteration)
        return await self._apply(lease, plan.compacted(event))

    async def manual_compaction(self, leased: LeasedRun) -> tuple[ContextCompaction | None, int, int]:
        """loomcycle's manual compaction of a parked or ended run (no lease: the run is at rest):
        (the event to record — None when there is nothing to summarize —, the message count of the
        history it was computed on, the history's token estimate). ProviderError when the summary
        fails; None agent: the run's agent is gone (`AgentGone`)."""
        agent = await self._agent_for(leased)
        if agent is None:
            raise AgentGone(f"the run's agent {leased.agent!r} no longer exists")
        history = await self._session_history(leased) if leased.session_seq else None
        transcript = Replayer(history).feed(leased.events).transcript()
        msgs = transcript.messages
        event = await self.compaction_of(msgs, agent, compaction_settings(agent, leased), "manual",
                                         transcript.iterations + 1, (leased.run_id, leased.agent), leased.events)
        return event, len(msgs), compaction.estimate_tokens(msgs)

    async def compaction_of(self, msgs: list[Message], agent: ResolvedAgent, settings: compaction.Settings,
                            trigger: str, iteration: int, caller: tuple[str, str],
                            history: list[tuple[int, str, dict[str, Any]]]) -> ContextCompaction | None:
        """A compaction of `msgs` computed now, outside any step (a manual one, a replay's): None
        when there is too little to summarize (fewer than 4 messages, or nothing before the kept
        tail); ProviderError when the summary fails or is empty."""
        if len(msgs) < compaction.MIN_COMPACT_MESSAGES:
            return None
        todo = compaction.plan(msgs, settings, 0)
        if todo is None:
            return None
        summary = await self.summarize(caller, agent, todo.span, settings, iteration, history)
        if not summary:
            raise ProviderError("summarization produced no text", code="summary_empty")
        return ContextCompaction(summary, todo.keep_n, todo.keep_first, todo.before_tokens,
                                 compaction.after_tokens(todo, summary), trigger, iteration)

    async def summarize(self, caller: tuple[str, str], agent: ResolvedAgent, span: list[Message],
                        settings: compaction.Settings, iteration: int,
                        history: list[tuple[int, str, dict[str, Any]]]) -> str:
        """One model call without tools on the agent's route (`settings.model` on the same
        providers when set) for `caller` (the run id and agent name the request is made for): the
        summary of `span`, stripped."""
        assert agent.route is not None
        route = agent.route
        if settings.model:
            route = dataclasses.replace(route, candidates=tuple(dataclasses.replace(c, model=settings.model)
                                                                for c in route.candidates))
        call = Call(
            run_id=caller[0], agent=caller[1], iteration=iteration,
            system=compaction.summary_system(settings.target_percentage),
            messages=scrub_messages([compaction.summary_prompt(span)]),
            request={"tools": [], "max_tokens": agent.config.max_tokens,
                     "options": {"mock": agent.config.mock, "purpose": compaction.SUMMARY_PURPOSE}},
            history=history, has_thinking=False,
        )
        policy = RetryPolicy(retries=self.settings.provider_retries, max_wait_s=self.settings.max_retry_wait_s)
        response = await call_route(route, call, policy, [])
        return "".join(b.text for b in response.content if isinstance(b, TextBlock)).strip()

    async def ask(self, caller: tuple[str, str], agent: ResolvedAgent, system: str, prompt: str, purpose: str,
                  model: str | None = None) -> str:
        """One model call without tools on the agent's route (`model` on the same providers when
        given) for `caller` (run id, agent name): the answer's text, stripped. `purpose` is the
        request's `options.purpose` (the mock provider answers by it). Memory `add` with `infer`
        extracts facts with it (substrate/memfacts.py)."""
        assert agent.route is not None
        route = agent.route
        if model:
            route = dataclasses.replace(route, candidates=tuple(dataclasses.replace(c, model=model)
                                                                for c in route.candidates))
        call = Call(
            run_id=caller[0], agent=caller[1], iteration=0, system=system,
            messages=scrub_messages([Message("user", [TextBlock(prompt)])]),
            request={"tools": [], "max_tokens": agent.config.max_tokens,
                     "options": {"mock": agent.config.mock, "purpose": purpose}},
            history=[], has_thinking=False,
        )
        policy = RetryPolicy(retries=self.settings.provider_retries, max_wait_s=self.settings.max_retry_wait_s)
        response = await call_route(route, call, policy, [])
        return "".join(b.text for b in response.content if isinstance(b, TextBlock)).strip()

    async def _model_turn(self, lease: Lease, agent: ResolvedAgent, transcript: Transcript,
                          soft_budget: tuple[Breach, ...] = ()) -> StepResult:
        leased = lease.run
        iteration = transcript.iterations + 1
        # a soft budget crossed for the first time: recorded with the turn (engine/plan.py)
        retry_events: list[NewEvent] = plan.soft_crossings(soft_budget, leased.events, iteration)
        for crossed in retry_events:
            info = crossed.payload.get("limit")
            metrics().budget_crossed(str(info.get("scope")) if isinstance(info, dict) else "", "soft")
        try:
            response = await self._interruptible(
                lease, self._call_model(lease, agent, transcript, iteration, retry_events)
            )
        except ProviderError as exc:
            return await self._apply(lease, plan.failed(
                transcript, retry_events, exc.code, exc.message, exc.details))
        except StepInterrupted as exc:
            if agent.config.provider == CODE_JS:  # cancelled while its JavaScript replayed (loomcycle's code)
                exc.code = CODE_AGENT_CANCELLED
            raise

        turn = retry_events + _assistant_events(response, iteration)
        tool_uses = [b for b in response.content if isinstance(b, ToolUseBlock)]
        usage = response.usage.to_json()
        if not tool_uses and leased.interactive:  # end of turn: park for the next input
            inputs = await self.steering.input_facts(leased)
            return await self._apply(lease, plan.park_for_input(
                leased.run_id, turn, transcript.consumed_input_id, leased.iterations, inputs, delta=1, usage=usage,
                wake=plan.resident_wake(leased.interactive, leased.parent_wait_key)))
        if not tool_uses:  # complete, unless input was queued while the model answered
            latest = await self.steering.latest_input(leased)
            return await self._apply(lease, plan.end_of_turn(
                turn, transcript.usage, usage, consumed=transcript.consumed_input_id, latest_input=latest))

        transcript.usage = plan.add_usage(transcript.usage, usage)
        turn_usage: dict[str, Any] = dict(response.usage.to_json())
        if response.max_context_tokens:
            turn_usage["max_context_tokens"] = response.max_context_tokens
        calls = TurnCalls(leased, agent, tool_uses, iteration, {}, turn_usage)
        return await self._tools_and_commit(lease, calls, turn, usage=usage, new_iteration=True,
                                            totals=transcript.usage)

    async def _steer(self, lease: Lease, transcript: Transcript) -> StepPlan | Transcript:
        """Take the steering queue (the caller saw `input_seq` move): a plan when a turn cancel
        parks the run, else the transcript with the queued turns recorded."""
        leased = lease.run
        version = await self.steering.input_version(leased)  # before looking at the queue
        steered = plan.steer(await self.steering.queued(leased, transcript.consumed_input_id), transcript)
        if steered is None:
            return transcript  # input waits until the pending tool calls have their results
        if steered.abandon:  # before the commit: idempotent, and a crash in between repeats it
            await self.steering.abandon_turn(leased)
        consumed = functools.partial(self.steering.mark_consumed, leased, steered.consumed_through)
        if steered.park:
            behind = max(0, transcript.iterations - leased.iterations)  # a crashed step's turn, not yet counted
            inputs = await self.steering.input_facts(leased, version)
            parked = plan.park_for_input(leased.run_id, steered.events, transcript.consumed_input_id,
                                         leased.iterations, inputs, delta=behind,
                                         wake=plan.resident_wake(leased.interactive, leased.parent_wait_key))
            parked.after.append(consumed)
            return parked
        await self._append(lease, steered.events)
        await consumed()
        self.hub.notify(leased.run_id)
        return self._transcript(lease)

    async def _append(self, lease: Lease, events: list[NewEvent]) -> None:
        """Record `events` mid-step (the assistant turn before its external tools, steered turns)."""
        lease.appended(events, await self.steps.append(lease.run, lease.owner, events))

    async def _tools_and_commit(
        self,
        lease: Lease,
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
        leased = lease.run
        if leased.run_options.replay is not None:  # a replay fork: answer what matches the original's record
            answers = await self._replay_answers(leased, calls)
            calls.replayed = answers.results
            if answers.diverged is not None and turn:  # recorded once, with the turn that made the call
                turn.append(answers.diverged)
        external: dict[str, Outcome] = {}
        if calls.external:
            if turn:
                await self._append(lease, turn)
                self.hub.notify(leased.run_id)
                turn = []
            external = await self._interruptible(lease, self.runner.run_external(calls))
        await self._stop_if_cancelled(leased)  # before any transactional effect
        cap = iteration_cap(calls.agent, leased)

        async def commit(transactional: dict[str, Outcome]) -> StepResult:
            outcomes = self.runner.in_order(calls, external, transactional)
            done_totals = totals if totals is not None or calls.iteration < cap else self._transcript(lease).usage
            return await self._apply(lease, plan.after_tools(
                outcomes, turn, iteration=calls.iteration, cap=cap, totals=done_totals or {}, usage=usage,
                new_iteration=new_iteration))

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

    async def _replay_answers(self, leased: LeasedRun, calls: TurnCalls) -> forkreplay.Answers:
        """Which of a replay fork's calls the original's record answers (engine/forkreplay.py)."""
        source = leased.run_options.replay or {}
        run_id, after = str(source.get("run_id") or ""), int(source.get("after_seq") or 0)
        rec = forkreplay.record(await self.steps.tool_record(leased.tenant_id, run_id, after))
        return forkreplay.answer(run_id, rec, forkreplay.made_before(leased.events, calls.uses), calls.uses,
                                 frozenset(calls.agent.tools_by_name))

    async def _apply(self, lease: Lease, step_plan: StepPlan) -> StepResult:
        """The one place a step commits, and the one place it sends its next step: commit the
        plan's events and outcome under the lease fence, then — as the commit left the run — keep
        the lease for the next step (chain), send it, or stop (parked, finished); then run the
        plan's after-commit effects (its wake-ups; a run's end closes its resident sub-agents)."""
        leased, outcome = lease.run, step_plan.outcome
        if outcome.enqueue_next and step_plan.chainable and not outcome.final:
            outcome.chain_owner = self._next_chain_owner(lease)
            outcome.enqueue_next = outcome.chain_owner is None
        committed = await self.steps.commit(leased, lease.owner, step_plan.events, outcome, stale=lease.stale)
        kept = lease.committed(committed, step_plan.events, outcome)
        if committed.marked:  # the job carries this process's mark: fill in (or give up) what it promises
            self.steps.keep(leased.run_id, leased.last_seq, leased.events if kept else None, lease.replayer)
        if outcome.final:
            result = StepResult.FINISHED
        elif outcome.waits:  # the store turns a park that a poke raced into a running step
            result = StepResult.PARKED
        elif committed.chain_owner is not None:
            result = StepResult.CHAINED
        else:
            await self.sender.next_step(leased.run_id, committed.step_no)
            result = StepResult.CONTINUED
        if step_plan.wake:  # a resident sub-agent's turn ended: wake its parent's call
            await self.steering.wake(leased, step_plan.wake)
        if outcome.final and plan.opened_residents(leased.events, step_plan.events):
            await self.steering.close_residents(leased)  # a run's end closes its resident sub-agents
        for effect in step_plan.after:
            await effect()
        return result

    def _next_chain_owner(self, lease: Lease) -> str | None:
        if lease.chained + 1 >= self.settings.chain_steps or time.monotonic() >= lease.deadline:
            return None
        return self.new_owner()

    async def _session_history(self, leased: LeasedRun) -> list[Message]:
        """The messages of the session's earlier runs (a continuation's history; engine/history.py)."""
        return await self.histories.of(leased)

    # -- model ---------------------------------------------------------------------------------------

    async def _call_model(
        self,
        lease: Lease,
        agent: ResolvedAgent,
        transcript: Transcript,
        iteration: int,
        retry_events: list[NewEvent],
    ) -> ModelResponse:
        """Call the agent's model through its route (engine/routing.py): in-step retries, then
        the next tier candidate. `retry`/`provider_fallback`/… events land in `retry_events`,
        which the caller persists whatever the outcome. Text deltas go to live subscribers."""
        leased = lease.run
        cfg = agent.config
        system = cfg.system_prompt
        if self.render_prompt is not None and ("{{" in system or cfg.inject_tool_guide):
            system = await self.render_prompt(system, ToolContext(
                principal=Principal(leased.tenant_id, leased.user_id), run_id=leased.run_id, tool_use_id="",
                iteration=iteration, agent=leased.agent, agent_config=cfg, services=self.tools, model=agent.model,
                provider=agent.provider_id, def_id=leased.def_id, allowed_hosts=leased.allowed_hosts,
                parent_context=leased.parent_context))
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
            messages=self._scrubbed(lease, transcript),
            request={"tools": agent.tool_specs, "max_tokens": cfg.max_tokens, "options": {
                "mock": cfg.mock, **(cfg.sampling.model_dump(exclude_none=True) if cfg.sampling else {}),
                **({"effort": cfg.effort} if cfg.effort else {}),
                **(leased.run_options.sampling or {}),  # loomcycle's sampling: the run's wins
                **({"code_agent": self._code_agent_options(leased, cfg)} if cfg.provider == CODE_JS else {})}},
            history=leased.events,
            tool_ids=transcript.tool_ids,
            has_thinking=transcript.has_thinking,
        )
        policy = RetryPolicy(retries=self.settings.provider_retries, max_wait_s=self.settings.max_retry_wait_s)
        return await call_route(agent.route, call, policy, retry_events, self._delta_sink(leased.run_id, iteration))

    @staticmethod
    def _code_agent_options(leased: LeasedRun, cfg: AgentConfig) -> dict[str, Any]:
        """What a code agent's replay reads besides the transcript (providers/codejs.py): its inline
        code, the run's start (clock anchor and time budget), metadata and user."""
        started = leased.created_at
        return {"code_body": cfg.code, "run_timeout_seconds": cfg.run_timeout_seconds,
                "started_ms": int(started.timestamp() * 1000) if started is not None else None,
                "metadata": dict(leased.metadata or {}), "user_id": leased.user_id or ""}

    @staticmethod
    def _scrubbed(lease: Lease, transcript: Transcript) -> list[Message]:
        """The outbound scrub of the transcript's messages; along a lease chain only the messages
        that are new since the last step are scrubbed (the rest is remembered by the replay state)."""
        if lease.replayer is not None:
            return lease.replayer.scrubbed(transcript, scrub_key(), scrub_messages)
        return scrub_messages(transcript.messages)

    def _delta_sink(self, run_id: str, iteration: int) -> Callable[[Candidate, int], DeltaSink | None]:
        """Live `text_delta`/`thinking_delta` frames for the run's SSE readers (never persisted)."""
        hub = self.hub

        def factory(cand: Candidate, attempt: int) -> DeltaSink:
            async def sink(kind: str, delta: str) -> None:
                frame = DELTA_OF.get(kind)  # a kind with no frame is nobody's to show
                if frame is not None and hub.has_live(run_id):
                    hub.publish(
                        run_id,
                        frame,
                        {"text": delta, "iteration": iteration, "attempt": attempt, "provider": cand.provider_id},
                    )

            return sink

        return factory

    # -- endings --------------------------------------------------------------------------------------

    async def _step_crashed(self, lease: Lease, exc: Exception) -> StepResult:
        leased = lease.run
        try:
            if leased.step_failures + 1 >= MAX_STEP_FAILURES:
                message = f"step failed {MAX_STEP_FAILURES} times; last error: {type(exc).__name__}: {exc}"
                await self._apply(lease, plan.failed(self._transcript(lease), [], "internal_error", message))
                return StepResult.FINISHED
            backoff = min(30.0, 0.5 * 2**leased.step_failures)
            await self.steps.release_after_failure(leased, lease.owner, backoff)
        except Exception:
            log.exception("could not hand back step %s/%s; the sweeper will", leased.run_id, leased.step_no)
        return StepResult.RETRY_LATER

    # -- lease renewal ----------------------------------------------------------------------------

    def _start_renewal(self, leased: LeasedRun, owner: str) -> None:
        task = asyncio.ensure_future(self._renew(leased, owner))
        self._renewals.add(task)  # referenced until done: the loop keeps only weak references to tasks
        task.add_done_callback(self._renewals.discard)

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
            events.append(Thinking(block.thinking, block.signature, iteration, block.source).event())
        elif isinstance(block, TextBlock):
            text_parts.append(block.text)
    if text_parts:
        events.append(Text("".join(text_parts), iteration).event())
    for block in response.content:
        if isinstance(block, ToolUseBlock):
            events.append(ToolCall(ToolUseRef(block.id, block.name, block.input), iteration).event())
    usage: dict[str, object] = dict(response.usage.to_json(), model=response.model, provider=response.provider)
    if response.max_context_tokens:
        usage["max_context_tokens"] = response.max_context_tokens
    events.append(Usage(usage, iteration).event())
    return events


def compaction_settings(agent: ResolvedAgent, leased: LeasedRun) -> compaction.Settings:
    """The run's compaction settings: the agent's < the run's (a spawn's merged into the run's)."""
    return compaction.Settings.resolve(agent.config.compaction, leased.run_options.compaction)


def _lease_compaction(lease: Lease, agent: ResolvedAgent) -> compaction.Settings:
    """`compaction_settings`, resolved once per lease chain (per agent config: a team run's step
    may run another agent)."""
    kept = lease.compaction
    if kept is None or kept[0] is not agent.config:
        kept = lease.compaction = (agent.config, compaction_settings(agent, lease.run))
    return kept[1]


def iteration_cap(agent: ResolvedAgent, leased: LeasedRun) -> int:
    cfg = agent.config
    return plan.iteration_cap(cfg.max_iterations, unbounded=cfg.unbounded_iterations, interactive=leased.interactive,
                              explicit="max_iterations" in cfg.model_fields_set)


def _last_turn_usage(events: list[tuple[int, str, dict[str, Any]]]) -> dict[str, int]:
    """The token counts of the last recorded `usage` event (the turn a crashed step appended)."""
    for _seq, etype, payload in reversed(events):
        if etype == EventType.USAGE:
            return Usage.parse(payload).tokens()
    return {}


def _deadline(leased: LeasedRun, agent: ResolvedAgent | None) -> float | None:
    """The run's deadline: its own (`run_timeout_seconds` of the request), or an LLM agent's
    `run_timeout_seconds` counted from the run's start, whichever is first (a code agent's budget is
    its provider's, providers/codejs.py)."""
    deadline = leased.run_options.deadline_unix
    cfg = agent.config if agent is not None else None
    if cfg is None or cfg.run_timeout_seconds is None or cfg.provider == CODE_JS or leased.created_at is None:
        return deadline
    own = leased.created_at.timestamp() + cfg.run_timeout_seconds
    return own if deadline is None else min(deadline, own)

