"""The step's deciders (engine/plan.py) without a database: the matrix tests/waiting and
tests/integration/test_engine.py exercise against Postgres, decided here as pure functions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from treadle.domain.content import ToolUseBlock
from treadle.domain.events import EventType
from treadle.domain.runs import NewEvent, StopReason
from treadle.engine import plan
from treadle.engine.outcomes import ParkedCall, tool_result_event
from treadle.engine.plan import Facts, InputFacts, Next, StepPlan
from treadle.engine.replay import Transcript, replay
from treadle.store.inputs import QueuedInput
from treadle.tools.base import Park

Ev = tuple[int, str, dict[str, Any]]
CORE = Path(__file__).resolve().parents[2] / "core" / "treadle"


def events(*items: tuple[str, dict[str, Any]]) -> list[Ev]:
    return [(i + 1, t, p) for i, (t, p) in enumerate(items)]


def user(text: str = "hi", input_id: int | None = None) -> tuple[str, dict[str, Any]]:
    p: dict[str, Any] = {"segments": [{"role": "user", "content": [{"type": "text", "text": text}]}]}
    if input_id is not None:
        p.update(input_id=input_id, source="steer")
    return "user_input", p


def call(tid: str, iteration: int = 1) -> tuple[str, dict[str, Any]]:
    return "tool_call", {"tool_use": {"id": tid, "name": "Memory", "input": {}}, "iteration": iteration}


def usage(iteration: int = 1) -> tuple[str, dict[str, Any]]:
    return "usage", {"usage": {"input_tokens": 1, "output_tokens": 1}, "iteration": iteration}


def result(tid: str) -> tuple[str, dict[str, Any]]:
    return "tool_result", {"tool_use": {"id": tid, "name": "Memory", "input": {}}, "text": "ok", "is_error": False}


def facts(**kw: Any) -> Facts:
    base: dict[str, Any] = dict(cancel_requested=False, cancel_reason=None, deadline_unix=None, agent_known=True,
                                agent_name="a", input_seq=0, interactive=False, at_rest=False, iteration_cap=10)
    base.update(kw)
    return Facts(**base)


def types(p: StepPlan) -> list[str]:
    return [e.type for e in p.events]


# -- top -------------------------------------------------------------------------------------------


def test_a_pending_cancel_wins_over_everything_and_answers_pending_calls() -> None:
    t = replay(events(user(), call("t1")))
    decided = plan.top(facts(cancel_requested=True, cancel_reason="stop", input_seq=5, deadline_unix=0.0), t, 1.0)
    assert isinstance(decided, StepPlan)
    assert types(decided) == ["tool_result", "done"]
    assert decided.events[0].payload["is_error"] and decided.events[0].tool_use_id == "t1"
    assert decided.events[-1].payload["stop_reason"] == "cancelled" and decided.events[-1].payload["reason"] == "stop"
    assert decided.outcome.status == "cancelled" and decided.outcome.final


def test_the_run_deadline_fails_the_run_before_the_agent_is_looked_at() -> None:
    t = replay(events(user()))
    decided = plan.top(facts(deadline_unix=100.0, agent_known=False), t, 100.0)
    assert isinstance(decided, StepPlan)
    assert decided.outcome.status == "failed" and decided.events[-1].payload["code"] == "run_timeout"
    assert plan.top(facts(deadline_unix=100.0), t, 99.9) is Next.MODEL


def test_an_unknown_agent_fails_the_run() -> None:
    decided = plan.top(facts(agent_known=False, agent_name="ghost"), replay(events(user())), 0.0)
    assert isinstance(decided, StepPlan) and decided.outcome.error is not None
    assert decided.outcome.error["code"] == "unknown_agent" and "ghost" in decided.outcome.error["error"]


@pytest.mark.parametrize(
    ("kw", "evs", "expected"),
    [
        ({"input_seq": 3}, [user(input_id=2)], Next.STEER),  # queued input newer than consumed
        ({"input_seq": 2}, [user(input_id=2)], Next.MODEL),  # consumed already
        ({"at_rest": True, "interactive": True}, [user()], Next.REST),
        ({}, [user(), call("t1")], Next.PENDING),
        ({"iteration_cap": 1}, [user(), call("t1"), usage(), result("t1")], "max_iterations"),
        ({"iteration_cap": 2}, [user(), call("t1"), usage(), result("t1")], Next.MODEL),
    ],
)
def test_top_decides_in_priority_order(kw: dict[str, Any], evs: list[tuple[str, dict[str, Any]]],
                                       expected: Next | str) -> None:
    decided = plan.top(facts(**kw), replay(events(*evs)), 0.0)
    if isinstance(expected, Next):
        assert decided is expected
    else:
        assert isinstance(decided, StepPlan) and decided.outcome.stop_reason == expected
        assert types(decided) == ["done"]


def test_at_rest_is_an_interactive_run_whose_last_event_is_awaiting_input() -> None:
    evs = events(user(), ("text", {"text": "x", "iteration": 1}), ("awaiting_input", {"since_turn": 1}))
    assert plan.at_rest(True, evs) and not plan.at_rest(False, evs) and not plan.at_rest(True, evs[:-1])


def test_iteration_cap_of_interactive_runs_is_a_backstop_unless_explicit() -> None:
    backstop = plan.INTERACTIVE_ITERATION_BACKSTOP
    assert plan.iteration_cap(5, unbounded=False, interactive=True, explicit=False) == backstop
    assert plan.iteration_cap(5, unbounded=False, interactive=True, explicit=True) == 5
    assert plan.iteration_cap(5, unbounded=True, interactive=False, explicit=True) == backstop
    assert plan.iteration_cap(5, unbounded=False, interactive=False, explicit=False) == 5


# -- after the model ------------------------------------------------------------------------------------


def test_an_interactive_turn_parks_on_the_input_key_at_the_version_read_first() -> None:
    turn = [NewEvent(EventType.TEXT, {"text": "hello", "iteration": 1})]
    p = plan.park_for_input("r1", turn, 0, 0, InputFacts(version=7, latest=0), delta=1, usage={"input_tokens": 3})
    assert types(p) == ["text", "awaiting_input"] and p.events[-1].payload == {"since_turn": 1}
    assert p.outcome.status == "waiting" and p.outcome.waits is not None
    (wait,) = p.outcome.waits
    assert (wait.kind, wait.key, wait.since_version) == ("awaiting_input", "input:r1", 7)
    assert p.outcome.iterations_delta == 1 and p.outcome.usage == {"input_tokens": 3}


def test_an_interactive_turn_goes_on_when_input_was_queued_meanwhile() -> None:
    p = plan.park_for_input("r1", [], 4, 2, InputFacts(version=7, latest=5))
    assert p.outcome.status == "running" and p.outcome.enqueue_next and not p.chainable
    assert p.outcome.waits is None
    # input the events themselves consume counts as consumed
    consumed = [plan.steer_event(QueuedInput(5, "input", "more"))]
    assert plan.park_for_input("r1", consumed, 4, 2, InputFacts(7, 5)).outcome.status == "waiting"


def test_end_of_turn_completes_with_totals_unless_late_input() -> None:
    turn = [NewEvent(EventType.TEXT, {"text": "bye", "iteration": 2})]
    done = plan.end_of_turn(turn, {"input_tokens": 10, "output_tokens": 1}, {"input_tokens": 5, "output_tokens": 2},
                            consumed=3, latest_input=3)
    assert types(done) == ["text", "done"] and done.outcome.stop_reason == StopReason.END_TURN.value
    assert done.events[-1].payload["usage"] == {"input_tokens": 15, "output_tokens": 3}
    late = plan.end_of_turn(turn, {}, {"input_tokens": 5}, consumed=3, latest_input=4)
    assert types(late) == ["text"] and late.outcome.status == "running" and late.outcome.enqueue_next
    assert late.outcome.iterations_delta == 1


# -- after the tools --------------------------------------------------------------------------------------


def _tu(tid: str) -> ToolUseBlock:
    return ToolUseBlock(id=tid, name="Channel", input={"op": "subscribe"})


def test_after_tools_goes_on_with_results_in_order() -> None:
    outcomes: list[NewEvent | ParkedCall] = [tool_result_event(_tu("a"), "1", False),
                                             tool_result_event(_tu("b"), "2", False)]
    p = plan.after_tools(outcomes, [], iteration=1, cap=5, totals={}, usage=None, new_iteration=True)
    assert [e.tool_use_id for e in p.events] == ["a", "b"] and p.chainable
    assert p.outcome.status == "running" and p.outcome.enqueue_next and p.outcome.iterations_delta == 1


def test_after_tools_ends_at_the_cap_with_the_results_recorded() -> None:
    outcomes: list[NewEvent | ParkedCall] = [tool_result_event(_tu("a"), "1", False)]
    p = plan.after_tools(outcomes, [], iteration=5, cap=5, totals={"input_tokens": 9}, usage=None, new_iteration=False)
    assert types(p) == ["tool_result", "done"] and p.outcome.stop_reason == "max_iterations"
    assert p.events[-1].payload["usage"] == {"input_tokens": 9} and p.outcome.iterations_delta == 0


def test_a_parked_call_parks_the_run_with_its_deadline_and_the_other_results() -> None:
    park = Park(kind="channel", keys={"ch:x": 3}, deadline_s=30.0)
    park.events.append(("tool_pending", {"n": 1}))
    outcomes: list[NewEvent | ParkedCall] = [tool_result_event(_tu("a"), "1", False), ParkedCall(_tu("b"), park)]
    p = plan.after_tools(outcomes, [], iteration=2, cap=2, totals={}, usage=None, new_iteration=True, now=1000.0)
    assert types(p) == ["tool_result", "tool_pending", "tool_parked"]  # parking wins over the cap
    parked = p.events[-1].payload
    assert parked["wait"] == {"kind": "channel", "keys": ["ch:x"], "deadline": 1030.0, "extra": park.extra}
    assert p.outcome.status == "waiting" and p.outcome.waits is not None
    assert [(w.tool_use_id, w.key, w.since_version, w.deadline_epoch) for w in p.outcome.waits] == [
        ("b", "ch:x", 3, 1030.0)]
    # a call woken before keeps its first deadline
    again = plan.parked([ParkedCall(_tu("b"), park, resume={"deadline": 1010.0})], [], iteration=2, usage=None,
                        delta=0, now=2000.0)
    assert again.outcome.waits is not None and again.outcome.waits[0].deadline_epoch == 1010.0


# -- steering -----------------------------------------------------------------------------------------------


def test_steering_waits_for_pending_calls_unless_a_turn_cancel_is_queued() -> None:
    t = replay(events(user(), call("t1")))
    assert plan.steer([QueuedInput(1, "input", "more")], t) is None
    assert plan.steer([], replay(events(user()))) is None
    s = plan.steer([QueuedInput(1, "input", "a"), QueuedInput(2, "turn_cancel", ""), QueuedInput(3, "input", "b")], t)
    assert s is not None and s.abandon and not s.park and s.consumed_through == 3
    assert [e.type for e in s.events] == ["tool_result", "user_input", "turn_cancelled", "user_input"]
    assert s.events[0].payload["is_error"] and s.events[2].payload["input_id"] == 2


def test_a_turn_cancel_with_nothing_after_parks_for_input() -> None:
    t = replay(events(user(), call("t1"), usage()))
    s = plan.steer([QueuedInput(4, "turn_cancel", "why")], t)
    assert s is not None and s.park and s.abandon
    assert s.events[-1].payload == {"reason": "why", "since_turn": 1, "input_id": 4}
    p = plan.park_for_input("r", s.events, t.consumed_input_id, 0, InputFacts(1, 4), delta=1)
    assert p.outcome.status == "waiting" and p.events[-1].payload == {"since_turn": 1}


def test_plain_input_becomes_user_turns() -> None:
    s = plan.steer([QueuedInput(1, "input", "a"), QueuedInput(2, "input", "b")], replay(events(user())))
    assert s is not None and not s.abandon and not s.park
    assert [e.payload["input_id"] for e in s.events] == [1, 2]
    assert replay(events(user(), *((e.type, e.payload) for e in s.events))).consumed_input_id == 2


def test_endings_answer_every_pending_call() -> None:
    t: Transcript = replay(events(user(), call("t1"), call("t2")))
    failed = plan.failed(t, [], "provider_error", "boom", {"status": 500})
    assert types(failed) == ["tool_result", "tool_result", "error"]
    assert failed.events[-1].payload == {"status": 500, "code": "provider_error", "error": "boom"}


# -- the shape of the engine ------------------------------------------------------------------------------


def test_the_engine_commits_and_sends_a_step_from_one_place() -> None:
    engine = CORE / "engine"
    source = {p.name: p.read_text() for p in engine.glob("*.py")}
    commits = [n for n, s in source.items() for _ in re.finditer(r"self\.steps\.commit\(", s)]
    sends = [n for n, s in source.items() for _ in re.finditer(r"\.next_step\(", s)]
    assert commits == ["step.py"], commits
    # the step's one send; the waker and the sweeper send what their own statements woke
    assert sorted(sends) == ["step.py", "waking.py", "workers.py"], sends


def test_run_options_round_trip_and_refuse_what_is_not_theirs() -> None:
    from treadle.domain.runs import RunOptions

    opts = RunOptions(tools=("Memory",), sampling={"temperature": 0.2}, user_tier="pro", run_timeout_seconds=30.0,
                      deadline_unix=1000.0)
    assert RunOptions.from_json(opts.to_json()) == opts
    assert RunOptions().to_json() is None and RunOptions.from_json(None) == RunOptions()
    odd = RunOptions.from_json({"tools": "Memory", "deadline_unix": True, "user_tier": 3})
    assert odd == RunOptions()  # wrong shapes are not read as options


# -- budgets -----------------------------------------------------------------------------------------


def test_a_spent_hard_budget_ends_the_run_before_the_model_but_after_pending_calls() -> None:
    from treadle.governance.budgets import Breach, Limit

    breach = Breach(Limit("acme", "tenant", "", hard_limit=100), "hard", 120.0, 100.0)
    spent = facts(over_budget=breach)
    assert plan.top(spent, replay(events(user(), call("t1"))), 0.0) is Next.PENDING  # the call is answered first
    decided = plan.top(spent, replay(events(user(), call("t1"), usage(), result("t1"))), 0.0)
    assert isinstance(decided, StepPlan) and decided.outcome.stop_reason == StopReason.BUDGET_EXCEEDED
    assert decided.outcome.status == "completed" and types(decided) == ["limit", "done"]
    assert decided.events[0].payload["limit"] == {"scope": "tenant", "scope_id": "", "severity": "hard",
                                                  "window": "month", "used": 120.0, "limit": 100.0,
                                                  "metric": "tokens"}
    cancelled = plan.top(facts(cancel_requested=True, over_budget=breach), replay(events(user())), 0.0)
    assert isinstance(cancelled, StepPlan) and cancelled.outcome.status == "cancelled"  # a cancel still wins


def test_a_soft_budget_is_recorded_once_per_run() -> None:
    from treadle.governance.budgets import Breach, Limit

    soft = (Breach(Limit("acme", "agent", "w", soft_limit=5), "soft", 7.0, 5.0),)
    first = plan.soft_crossings(soft, events(user()), 2)
    assert [e.type for e in first] == [EventType.LIMIT] and first[0].payload["iteration"] == 2
    recorded = events(user(), (first[0].type, first[0].payload))
    assert plan.soft_crossings(soft, recorded, 3) == []
    assert plan.soft_crossings((), recorded, 3) == []
