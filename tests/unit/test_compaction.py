"""Context compaction (engine/compaction.py, the replay of its marker, the deciders): the pairing
invariant at every cut position, replay rebuilding exactly the compacted history, the triggers."""

from __future__ import annotations

import random

import pytest

from tests.unit.test_replay import Transcript, assert_pairing
from treadle.config import CompactionConfig
from treadle.domain.content import Message, ToolResultBlock
from treadle.domain.events import ContextCompaction
from treadle.engine import compaction, plan
from treadle.engine.replay import Replayer, replay


def conversation(turns: int, seed: int) -> Transcript:
    """A run of `turns` iterations: a prompt, steering inputs now and then, tool cycles of 0 to 3 calls."""
    rng = random.Random(seed)
    t = Transcript().prompt("the task").add("started", agent="a")
    for it in range(1, turns + 1):
        if rng.random() < 0.25:
            t.prompt(f"steer {it}")
        t.add("text", text=f"thinking {it}", iteration=it)
        calls = rng.randint(0, 3)
        ids = [f"t{it}_{k}" for k in range(calls)]
        for tid in ids:
            t.call(it, tid, q="x" * rng.randint(1, 400))
        t.usage(it, input_tokens=100 * it, output_tokens=5)
        for tid in reversed(ids):  # recorded in any order; replay answers in tool_use order
            t.result(tid, "r" * rng.randint(1, 600))
    return t


@pytest.mark.parametrize("seed", range(6))
def test_every_cut_keeps_tool_use_and_result_together(seed: int) -> None:
    msgs = replay(conversation(12, seed).events).messages
    for keep_last_n in range(len(msgs) + 2):
        for keep_first in (True, False):
            for window in (0, 200, 2000):
                todo = compaction.plan(msgs, compaction.Settings(keep_last_n=keep_last_n, keep_first=keep_first),
                                       window)
                if todo is None:
                    continue
                assert todo.tail == msgs[len(msgs) - todo.keep_n:]
                assert not todo.tail or compaction.is_fresh_user_turn(todo.tail[0])
                out = compaction.apply(msgs, "SUMMARY", todo.keep_n, todo.keep_first)
                assert_pairing(out)
                assert not any(isinstance(b, ToolResultBlock) for b in out[0].content)
                assert [m.role for m in out[:2]] == ["user", "assistant"] and "SUMMARY" in out[0].text()
                if keep_first:
                    assert out[0].text().startswith(compaction.PINNED_HEADER + "the task")


@pytest.mark.parametrize("seed", range(4))
def test_replay_rebuilds_the_compacted_history_at_every_boundary(seed: int) -> None:
    """A `context_compaction` event, at any boundary between iterations, replays into exactly what
    the live step made of the history; the events after it replay on top."""
    full = conversation(10, seed)
    boundaries = [i for i, (_s, etype, _p) in enumerate(full.events) if etype == "usage"]
    for b in boundaries:
        # the boundary: after the iteration's results
        end = b + 1
        while end < len(full.events) and full.events[end][1] == "tool_result":
            end += 1
        before = full.events[:end]
        msgs = replay(before).messages
        todo = compaction.plan(msgs, compaction.Settings(keep_last_n=3), 0)
        if todo is None:
            continue
        live = compaction.apply(msgs, "S", todo.keep_n, todo.keep_first)
        marker = ContextCompaction("S", todo.keep_n, todo.keep_first, 1, 1, "auto", 99).event()
        events = [*before, (len(before) + 1, marker.type, marker.payload)]
        assert replay(events).messages == live
        rest = [(len(events) + i + 1, e, p) for i, (_s, e, p) in enumerate(full.events[end:])]
        whole = replay([*events, *rest]).messages
        assert whole[:len(live)] == live
        assert_pairing(whole)
        # fed in pieces (a lease chain) the replay is the same
        r = Replayer()
        for ev in [*events, *rest]:
            r.feed([ev])
        assert r.transcript().messages == whole


def test_triggers() -> None:
    on = compaction.Settings.resolve(CompactionConfig(enabled=True, autocompact_at_pct=80))
    t = Transcript().prompt("go").add("started", agent="a")
    t.add("text", text="a", iteration=1).usage(1, input_tokens=700, cache_read_input_tokens=100,
                                                  max_context_tokens=1000)
    assert plan.compaction_due(on, replay(t.events)) == "auto"  # 800 of 1000: at 80 %
    assert plan.compaction_due(compaction.Settings(), replay(t.events)) is None  # auto is off by default
    low = Transcript().prompt("go").add("text", text="a", iteration=1).usage(1, input_tokens=10,
                                                                            max_context_tokens=1000)
    assert plan.compaction_due(on, replay(low.events)) is None
    no_window = Transcript().prompt("go").add("text", text="a", iteration=1).usage(1, input_tokens=10_000)
    assert plan.compaction_due(on, replay(no_window.events)) is None
    # right after a compaction: not again before the next iteration's usage (loomcycle's debounce)
    done = ContextCompaction("S", 0, True, 1, 1, "auto", 2).event()
    t.add(done.type, **done.payload)
    assert plan.compaction_due(on, replay(t.events)) is None
    # self: a Context op=compact call of the last iteration, whatever `enabled`
    s = Transcript().prompt("go").call(1, "c1", name="Context", op="compact").usage(1, input_tokens=1)
    s.result("c1", "{}", name="Context")
    assert plan.compaction_due(compaction.Settings(), replay(s.events)) == "self"
    failed = plan.compaction_failed("self", 2, "boom").events[0]
    s.add(failed.type, **failed.payload)
    assert plan.compaction_due(compaction.Settings(), replay(s.events)) is None  # tried for iteration 2


def test_settings_merge_agent_run_spawn() -> None:
    agent = CompactionConfig(enabled=True, keep_last_n=6, target_percentage=20)
    s = compaction.Settings.resolve(agent, {"keep_last_n": 2}, {"target_percentage": 30, "model": "m"})
    assert (s.enabled, s.keep_last_n, s.target_percentage, s.model, s.keep_first) == (True, 2, 30, "m", True)
    assert compaction.Settings.resolve(None) == compaction.Settings()
    with pytest.raises(ValueError, match="memory_flush"):
        CompactionConfig.model_validate({"memory_flush": True})
    with pytest.raises(ValueError):
        CompactionConfig.model_validate({"target_percentage": 60})


def test_a_session_history_is_compacted_with_the_run() -> None:
    history = replay(conversation(4, 1).events).messages
    own = Transcript().prompt("next turn").add("text", text="ok", iteration=1).usage(1, input_tokens=1)
    msgs = Replayer(history).feed(own.events).transcript().messages
    todo = compaction.plan(msgs, compaction.Settings(keep_last_n=2), 0)
    assert todo is not None
    marker = ContextCompaction("S", todo.keep_n, todo.keep_first, 1, 1, "auto", 2).event()
    events = [*own.events, (len(own.events) + 1, marker.type, marker.payload)]
    assert Replayer(history).feed(events).transcript().messages == compaction.apply(msgs, "S", todo.keep_n,
                                                                                     todo.keep_first)
    assert [m.role for m in compaction.compacted("", "S", [])] == ["user", "assistant"]
    assert isinstance(Message("user").content, list)
