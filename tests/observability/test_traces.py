"""One run, one trace: a run of three iterations with tool calls, its steps claimed from the real
Postgres queue by two workers (two runtimes, as two processes would be), is one trace — the
run's span, a span per step under it, the model and tool calls under their step — with the GenAI
attribute names, and no prompt, completion, tool input or tool result anywhere in it."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.spans import attrs, by_trace, leaked, span_id, tree
from treadle.engine.workers import WorkerPool
from treadle.providers.base import ModelRequest
from treadle.store.runs import NewRun
from treadle.testing import ScriptedProvider, ScriptFunction, open_test_runtime, tool_results, tool_use, user_text

PROMPT = "PROMPT-c0ffee remember the launch code"
TOOL_VALUE = "TOOLINPUT-5ecret-launch-code-4711"
KEY = "KEY-d00d"
COMPLETION = "COMPLETION-beef the code is safe"


def model(req: ModelRequest) -> Any:
    done = len(tool_results(req))
    if done == 0:
        return [tool_use("Memory", {"op": "set", "scope": "agent", "key": KEY, "value": TOOL_VALUE})]
    if done == 1:
        return [tool_use("Memory", {"op": "get", "scope": "agent", "key": KEY})]
    return COMPLETION


AGENTS = {"a": {"provider": "scripted", "model": "echo", "tools": ["Memory"], "system_prompt": "SYSTEM-f00d"}}


async def completed_run(db_url: str, agents: dict[str, Any], model: ScriptFunction, agent: str) -> str:
    """Run `agent` (its model answered by `model`) to its end on a runtime of its own; its id."""
    async with open_test_runtime(agents, database_url=db_url, providers=[ScriptedProvider(model)]) as (rt, d):
        run, _ = await rt.start_run(NewRun(tenant_id="default", agent=agent, segments=user_text("go")))
        await d.drain()
        record = await rt.runs.get("default", run.id)
    assert record is not None and record.status == "completed", record
    return run.id


async def test_a_run_across_two_workers_is_one_trace_without_content(
    migrated_db_url: str, spans: InMemorySpanExporter
) -> None:
    opened = [
        open_test_runtime(AGENTS, database_url=migrated_db_url, inline=False, providers=[ScriptedProvider(model)])
        for _ in range(2)
    ]
    rt_a, queue_a = await opened[0].__aenter__()
    try:
        rt_b, queue_b = await opened[1].__aenter__()
        try:
            run, _ = await rt_a.start_run(NewRun(tenant_id="default", agent="a", segments=user_text(PROMPT)))
            pools = [WorkerPool(rt_a.engine, queue_a, 1), WorkerPool(rt_b.engine, queue_b, 1)]
            claims = 0
            while not (await rt_a.runs.get("default", run.id)).terminal:  # type: ignore[union-attr]
                pool = pools[claims % 2]
                assert await pool._claim_and_run(), "the queue ran dry before the run ended"
                await pool.settle()  # the claimed step runs as a task of its own
                claims += 1
                assert claims < 10
            record = await rt_a.runs.get("default", run.id)
            events = await rt_a.runs.events("default", run.id)
            workers = {rt_a.engine._owner_prefix, rt_b.engine._owner_prefix}
        finally:
            await opened[1].__aexit__(None, None, None)
    finally:
        await opened[0].__aexit__(None, None, None)

    assert record is not None and (record.status, record.iterations) == ("completed", 3)
    finished = spans.get_finished_spans()
    traces = by_trace(finished)
    assert len(traces) == 1, [tree(t) for t in traces.values()]
    (trace_spans,) = traces.values()
    assert tree(trace_spans) == sorted([
        ("invoke_agent a", None),
        *[("step a", "invoke_agent a")] * 3,
        *[("chat echo", "step a")] * 3,
        *[("execute_tool Memory", "step a")] * 2,
    ])
    steps = sorted((s for s in trace_spans if s.name == "step a"), key=lambda s: attrs(s)["treadle.step_no"])
    assert [attrs(s)["treadle.step_no"] for s in steps] == [0, 1, 2]
    assert {attrs(s)["treadle.worker"] for s in steps} == workers  # both workers took steps
    assert all(attrs(s)["treadle.run.id"] == run.id for s in steps)
    assert [attrs(s)["treadle.outcome"] for s in steps] == ["continued", "continued", "finished"]

    chats = [s for s in trace_spans if s.name.startswith("chat ")]
    for c in chats:
        assert attrs(c)["gen_ai.operation.name"] == "chat"
        assert attrs(c)["gen_ai.provider.name"] == "scripted"
        assert attrs(c)["gen_ai.request.model"] == "echo"
        assert attrs(c)["gen_ai.usage.input_tokens"] == 1
        assert attrs(c)["gen_ai.usage.output_tokens"] >= 1
    assert sorted(attrs(c)["treadle.iteration"] for c in chats) == [1, 2, 3]
    tools = [s for s in trace_spans if s.name.startswith("execute_tool")]
    assert {attrs(t)["gen_ai.tool.name"] for t in tools} == {"Memory"}
    assert {attrs(t)["treadle.outcome"] for t in tools} == {"ok"}
    # each model/tool span sits under the step of its iteration
    step_of = {span_id(s.get_span_context()): attrs(s)["treadle.step_no"] for s in steps}
    assert sorted((step_of[span_id(c.parent)], attrs(c)["treadle.iteration"]) for c in chats) == [
        (0, 1), (1, 2), (2, 3)]

    # no content: the prompt, the system prompt, the tool inputs and results, the completion
    contents = [PROMPT, "SYSTEM-f00d", TOOL_VALUE, KEY, COMPLETION]
    for e in events:
        if e.type == "tool_result":
            contents.append(e.payload["text"])
        if e.type == "text":
            contents.append(e.payload["text"])
    assert TOOL_VALUE in "".join(contents[5:])  # the Memory get answered with the stored value
    assert leaked(finished, contents) == []


async def test_a_sub_agent_run_is_its_own_trace_linked_to_the_parent(
    db_url: str, spans: InMemorySpanExporter
) -> None:
    def parent_model(req: ModelRequest) -> Any:
        if not tool_results(req):
            return [tool_use("Agent", {"op": "spawn", "name": "child", "prompt": "CHILD-PROMPT-1234"})]
        return "parent done"

    agents = {
        "parent": {"provider": "scripted", "model": "echo", "tools": ["Agent"]},
        "child": {"provider": "mock", "model": "echo"},
    }
    run_id = await completed_run(db_url, agents, parent_model, "parent")
    finished = spans.get_finished_spans()
    runs = {s.name: s for s in finished if s.name.startswith("invoke_agent ")}
    assert set(runs) == {"invoke_agent parent", "invoke_agent child"}
    parent, child = runs["invoke_agent parent"], runs["invoke_agent child"]
    assert child.parent is None and child.context.trace_id != parent.context.trace_id
    assert attrs(child)["treadle.run.parent_id"] == run_id
    (link,) = child.links
    caller = next(s for s in finished if s.context.span_id == link.context.span_id)
    assert caller.name == "execute_tool Agent" and caller.context.trace_id == parent.context.trace_id
    # the child's steps are in the child's trace
    child_steps = [s for s in finished if s.name == "step child"]
    assert child_steps and {s.context.trace_id for s in child_steps} == {child.context.trace_id}
    assert leaked(finished, ["CHILD-PROMPT-1234"]) == []


async def test_retries_and_made_up_tool_names_are_recorded_without_content(
    db_url: str, spans: InMemorySpanExporter, fresh_metrics: Any
) -> None:
    from treadle.errors import RetryableProviderError

    calls = {"n": 0}

    def flaky(req: ModelRequest) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RetryableProviderError("overloaded: SECRET-ERROR-TEXT", retry_after_s=0)
        if not tool_results(req):
            return [tool_use("MadeUpTool-SECRET-NAME", {"x": 1})]
        return "ok"

    agents = {"a": {"provider": "scripted", "model": "echo", "tools": ["Memory"]}}
    await completed_run(db_url, agents, flaky, "a")
    finished = spans.get_finished_spans()
    chats = sorted((s for s in finished if s.name == "chat echo"), key=lambda s: s.start_time or 0)
    assert [(attrs(c)["treadle.attempt"], c.status.is_ok) for c in chats] == [(0, False), (1, True), (0, True)]
    assert attrs(chats[0])["error.type"] == "RetryableProviderError"
    assert attrs(chats[0])["treadle.error.code"] == "provider_unavailable"
    (tool,) = [s for s in finished if s.name.startswith("execute_tool")]
    assert tool.name == "execute_tool (not permitted)" and attrs(tool)["treadle.outcome"] == "error"
    assert leaked(finished, ["SECRET-ERROR-TEXT", "SECRET-NAME"]) == []
    assert fresh_metrics.registry is not None
    get = fresh_metrics.registry.get_sample_value
    model = {"provider": "scripted", "model": "echo"}
    assert get("treadle_model_calls_total", {**model, "outcome": "retryable_error"}) == 1
    assert get("treadle_model_calls_total", {**model, "outcome": "ok"}) == 2
    assert get("treadle_tool_calls_total", {"tool": "(not permitted)", "outcome": "error"}) == 1
