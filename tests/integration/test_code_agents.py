"""Code agents (loomcycle's code-js, providers/codejs.py) on the real engine and Postgres: the
JavaScript is replayed from the transcript at every step, so a crash mid-run resumes by replay
with each (transactional) tool call executed once; divergence, limits and errors end the run
with their code and leave the worker healthy."""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from tests.support.tally import Crash, Tally
from treadle.dispatch.inline import InlineDispatcher
from treadle.providers.codejs import CodeJsProvider
from treadle.runtime import Runtime
from treadle.store.runs import NewRun
from treadle.testing import expire_lease, open_test_runtime, sweep, user_text

pytest.importorskip("quickjs")

TENANT = f"t_code_{secrets.token_hex(4)}"


COUNTER = """
function run(input) {
  var n = parseInt(input.prompt, 10), seen = [], r = Math.random(), t = Date.now();
  for (var i = 0; i < n; i++) {
    var out = JSON.parse(Tally({i: i, r: r, t: t}));
    seen.push(out.tally);
  }
  return {final_text: input.metadata.agent + " counted " + seen.join(",") + " r=" + r + " t=" + t};
}
"""

CODE_AGENTS = {"enabled": True, "step_timeout_seconds": 2, "memory_mb": 16}


def code_agent(code: str, **extra: Any) -> dict[str, Any]:
    return {"provider": "code-js", "code": code, "tools": ["Tally"], **extra}


@pytest.fixture
async def harness(db_url: str, tmp_path: Any) -> AsyncIterator[Any]:
    async with AsyncExitStack() as stack:

        async def open_rt(agents: dict[str, Any], tool: Tally, **cfg: Any) -> tuple[Runtime, InlineDispatcher]:
            return await stack.enter_async_context(open_test_runtime(
                agents, database_url=db_url, tools=[tool], home=tmp_path, workers=1,
                config={"code_agents": {**CODE_AGENTS, **cfg}},
            ))

        yield open_rt


async def start(rt: Runtime, agent: str, prompt: str) -> str:
    run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent=agent, segments=user_text(prompt)))
    return run.id


async def resume(rt: Runtime, run_id: str) -> None:
    """The worker died: its lease runs out and the sweep hands the step to the next one."""
    assert await expire_lease(rt, run_id)
    await sweep(rt)


async def test_a_code_agent_calls_its_tools_one_step_each_and_returns_its_text(harness: Any) -> None:
    tool = Tally()
    rt, disp = await harness({"counter": code_agent(COUNTER)}, tool)
    run_id = await start(rt, "counter", "5")
    await disp.drain()
    run = await rt.runs.get(TENANT, run_id)
    assert run is not None and run.status == "completed", run
    assert tool.invocations == 5 and await Tally.count(rt, TENANT, "counter") == 5
    events = await rt.runs.events(TENANT, run_id)
    calls = [e.payload for e in events if e.type == "tool_call"]
    assert [c["tool_use"]["input"]["i"] for c in calls] == [0, 1, 2, 3, 4]
    text = "".join(e.payload.get("text", "") for e in events if e.type == "text")
    assert text.startswith("counter counted 1,2,3,4,5 r=")


async def test_killed_mid_run_it_resumes_by_replay_each_call_once_same_text(harness: Any) -> None:
    """50 tool calls; the worker dies (mid-step, after the tool's write, before the commit) at
    several points; each resume replays the recorded results and goes on from the frontier."""
    n = 50
    clean = Tally()
    rt, disp = await harness({"clean": code_agent(COUNTER), "crashy": code_agent(COUNTER)}, clean)
    clean_id = await start(rt, "clean", str(n))
    await disp.drain()
    clean_run = await rt.runs.get(TENANT, clean_id)
    assert clean_run is not None and clean_run.status == "completed"

    crash_points = {3, 17, 18, 40}  # the tool's k-th invocation dies (counting re-runs)
    crashy = Tally(crash_at=crash_points)
    rt2, disp2 = await harness({"clean": code_agent(COUNTER), "crashy": code_agent(COUNTER)}, crashy,
                               deterministic=True)
    run_id = await start(rt2, "crashy", str(n))
    crashes = 0
    while True:
        try:
            await disp2.drain()
        except Crash:
            crashes += 1
            await resume(rt2, run_id)
            continue
        break
    assert crashes == len(crash_points)
    run = await rt2.runs.get(TENANT, run_id)
    assert run is not None and run.status == "completed", run
    assert await Tally.count(rt2, TENANT, "crashy") == n  # each crashed write rolled back with its step
    assert crashy.invocations == n + crashes
    events = await rt2.runs.events(TENANT, run_id)
    assert [e.type for e in events].count("tool_result") == n
    text = "".join(e.payload.get("text", "") for e in events if e.type == "text")
    want = "crashy counted " + ",".join(str(i) for i in range(1, n + 1))
    assert text.startswith(want + " r=")
    # the deterministic pin: loomcycle's fixed seed and clock anchor
    assert text.endswith(" t=1700000000000")


async def error_of(rt: Runtime, run_id: str) -> dict[str, Any]:
    run = await rt.runs.get(TENANT, run_id)
    assert run is not None and run.status == "failed", run
    assert run.error is not None
    return dict(run.error)


async def test_code_changed_mid_run_is_a_replay_divergence(harness: Any) -> None:
    v1 = "function run(input) { Tally({i: 1}); Tally({i: 2}); return 'v1'; }"
    v2 = "function run(input) { Tally({i: 9}); Tally({i: 2}); return 'v2'; }"
    rt, disp = await harness({"deploy": code_agent(v1)}, Tally(crash_at={2}))
    run_id = await start(rt, "deploy", "go")
    with pytest.raises(Crash):
        await disp.drain()
    rt2, disp2 = await harness({"deploy": code_agent(v2)}, Tally())
    await resume(rt2, run_id)
    await disp2.drain()
    err = await error_of(rt2, run_id)
    assert err["code"] == "code_agent_replay_divergence", err
    assert '{"i":1}' in err["error"] and '{"i":9}' in err["error"]
    good_id = await start(rt2, "deploy", "again")  # the worker goes on: v2 from its start is fine
    await disp2.drain()
    good = await rt2.runs.get(TENANT, good_id)
    assert good is not None and good.status == "completed", good


@pytest.mark.parametrize(("code", "want"), [
    ("function run(input) { while (true) {} }", "code_agent_timeout"),
    ("function run(input) { var a = []; while (true) { a.push(new Array(100000).fill(7)); } }",
     "code_agent_memory"),
    ("function run(input) { throw new Error('nope'); }", "code_agent_threw"),
    ("function run(input) { return Memory.get({scope: 'agent', key: 'x'}); }", "code_agent_threw"),
    ("function run(input) { return eval('1'); }", "code_agent_threw"),
    ("var x = 1;", "code_agent_threw"),
])
async def test_a_bad_code_agent_ends_with_its_code_and_the_worker_stays_healthy(
        harness: Any, code: str, want: str) -> None:
    tool = Tally()
    rt, disp = await harness({"bad": code_agent(code), "good": code_agent(COUNTER)}, tool)
    bad_id = await start(rt, "bad", "1")
    await disp.drain()
    err = await error_of(rt, bad_id)
    assert err["code"] == want, err
    good_id = await start(rt, "good", "2")
    await disp.drain()
    good = await rt.runs.get(TENANT, good_id)
    assert good is not None and good.status == "completed"


async def test_a_tool_error_is_thrown_into_the_code_which_may_catch_it(harness: Any) -> None:
    code = """
    function run(input) {
      try { Tally({fail: 'x'}); } catch (e) { return 'caught: ' + e.message; }
      return 'not thrown';
    }"""
    rt, disp = await harness({"catcher": code_agent(code)}, Tally())
    run_id = await start(rt, "catcher", "go")
    await disp.drain()
    events = await rt.runs.events(TENANT, run_id)
    text = "".join(e.payload.get("text", "") for e in events if e.type == "text")
    assert text == "caught: Tally refused x"


async def test_the_whole_run_budget_spans_the_replays(harness: Any) -> None:
    rt, disp = await harness({"slow": code_agent(COUNTER, run_timeout_seconds=1)}, Tally())
    run_id = await start(rt, "slow", "3")
    async with rt.pool.connection() as conn:  # the run began two seconds ago
        await conn.execute("UPDATE runs SET created_at = created_at - interval '2 seconds' WHERE id = %s",
                           (run_id,))
    await disp.drain()
    err = await error_of(rt, run_id)
    assert err["code"] == "code_agent_timeout", err


async def test_a_code_agent_spawns_an_llm_agent_and_parks_until_it_answers(harness: Any) -> None:
    code = """
    function run(input) {
      var child = Agent.spawn({name: 'echoer', prompt: 'ping ' + input.prompt});
      return 'child said: ' + (typeof child === 'string' ? child : JSON.stringify(child));
    }"""
    agents = {"spawner": {"provider": "code-js", "code": code, "tools": ["Agent"]},
              "echoer": {"model": "echo"}}
    rt, disp = await harness(agents, Tally())
    run_id = await start(rt, "spawner", "x")
    await disp.drain()
    run = await rt.runs.get(TENANT, run_id)
    assert run is not None and run.status == "completed", run
    events = await rt.runs.events(TENANT, run_id)
    assert "tool_parked" in [e.type for e in events]  # it waited parked for the child, as an LLM agent does
    text = "".join(e.payload.get("text", "") for e in events if e.type == "text")
    assert text.startswith("child said: ") and "ping x" in text, text


async def test_the_model_span_carries_the_code_hash(harness: Any) -> None:
    import hashlib

    from tests.support.spans import attrs, recording_spans

    code = "function run(input) { return 'hashed'; }"
    with recording_spans() as exporter:
        rt, disp = await harness({"hashed": code_agent(code)}, Tally())
        await start(rt, "hashed", "x")
        await disp.drain()
    chats = [attrs(s) for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    digest = hashlib.sha256(code.encode()).hexdigest()
    assert [a.get("provider.code_hash") for a in chats] == [digest]
    assert [(a.get("loomcycle.provider.code_hash"), a.get("loomcycle.provider.kind")) for a in chats] == [
        (digest, "synthetic-code")]  # loomcycle's attribute names as well


async def test_a_cancel_while_the_code_computes_ends_the_run_code_agent_cancelled(
        harness: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run is cancelled while its second replay spins (QuickJS cannot be interrupted from
    outside): the engine drops the replay's answer at once and the run ends `cancelled` with
    `code_agent_cancelled` (loomcycle's code), long before the step's own limit; the spinning
    replay ends on that limit and the worker goes on with other runs."""
    replaying = threading.Event()
    real = CodeJsProvider.replay

    def spy(self: CodeJsProvider, src: str, tools: list[str], run_input: dict[str, Any], recorded: list[Any],
            **kw: Any) -> Any:
        if recorded:  # the replay past the first call: it spins
            replaying.set()
        return real(self, src, tools, run_input, recorded, **kw)

    monkeypatch.setattr(CodeJsProvider, "replay", spy)
    spin = "function run(input) { Tally({i: 0}); var x = 0; while (true) { x++; } }"
    tool = Tally()
    rt, disp = await harness({"spin": code_agent(spin), "good": code_agent(COUNTER)}, tool,
                             step_timeout_seconds=8)
    run_id = await start(rt, "spin", "go")
    draining = asyncio.create_task(disp.drain())
    assert await asyncio.to_thread(replaying.wait, 30)
    t0 = time.monotonic()
    await rt.cancel_run(TENANT, run_id, "operator stop")
    await asyncio.wait_for(draining, 30)
    took = time.monotonic() - t0
    run = await rt.runs.get(TENANT, run_id)
    assert run is not None and run.status == "cancelled", run
    assert run.error is not None and run.error["code"] == "code_agent_cancelled", run.error
    assert run.error["error"] == "code_agent_cancelled: operator stop"
    assert took < 4, took  # not the step's 8 s limit
    assert tool.invocations == 1
    events = await rt.runs.events(TENANT, run_id)
    assert [e.type for e in events][-1] == "done" and "error" not in [e.type for e in events]
    good_id = await start(rt, "good", "2")
    await disp.drain()
    good = await rt.runs.get(TENANT, good_id)
    assert good is not None and good.status == "completed"


async def test_a_cancel_between_steps_is_a_plain_cancel(harness: Any) -> None:
    """A cancel heard at a step's top (no replay running) is an ordinary cancel: no error code."""
    rt, disp = await harness({"counter": code_agent(COUNTER)}, Tally())
    run_id = await start(rt, "counter", "3")
    await rt.cancel_run(TENANT, run_id, "before it ran")
    await disp.drain()
    run = await rt.runs.get(TENANT, run_id)
    assert run is not None and run.status == "cancelled" and run.error is None, run
