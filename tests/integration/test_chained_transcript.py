"""A worker that chains steps keeps the transcript it holds (issue 12, item 4): each chained step
feeds the replay only the events its last commit added, and what the model is sent is exactly
what a full replay of the stored transcript gives."""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

from treadle.domain.content import Message, TextBlock, ThinkingBlock
from treadle.engine.lease import Lease
from treadle.engine.replay import Replayer, replay
from treadle.store.runs import NewRun
from treadle.store.steps import LeasedRun

Event = tuple[int, str, dict[str, Any]]
TENANT = f"t_chain_{secrets.token_hex(4)}"


def transcript_events() -> list[Event]:
    """Every kind of event replay knows, in a plausible order (two tool turns, a parked call, a
    second prompt, an orphaned tool_use, the end)."""
    ev: list[tuple[str, dict[str, Any]]] = [
        ("user_input", {"segments": [{"role": "system", "content": [{"type": "trusted-text", "text": "be brief"}]},
                                     {"role": "user", "content": [{"type": "trusted-text", "text": "go"}]}]}),
        ("started", {"agent": "a"}),
        ("thinking", {"text": "hmm", "signature": "s", "iteration": 1}),
        ("text", {"text": "calling", "iteration": 1}),
        ("tool_call", {"tool_use": {"id": "t1", "name": "Memory", "input": {"op": "get"}}, "iteration": 1}),
        ("tool_call", {"tool_use": {"id": "t2", "name": "Memory", "input": {"op": "set"}}, "iteration": 1}),
        ("usage", {"usage": {"input_tokens": 10, "output_tokens": 2}, "iteration": 1}),
        ("tool_result", {"tool_use": {"id": "t2"}, "text": "ok2", "is_error": False}),
        ("tool_result", {"tool_use": {"id": "t1"}, "text": "ok1", "is_error": True}),
        ("tool_call", {"tool_use": {"id": "t3", "name": "Channel", "input": {}}, "iteration": 2}),
        ("usage", {"usage": {"input_tokens": 5, "output_tokens": 1}, "iteration": 2}),
        ("tool_parked", {"tool_use": {"id": "t3"}, "wait": {"kind": "channel", "keys": ["k"]}}),
        ("tool_result", {"tool_use": {"id": "t3"}, "text": "woken", "is_error": False}),
        ("tool_call", {"tool_use": {"id": "t4", "name": "Memory", "input": {}}, "iteration": 3}),
        ("usage", {"usage": {"input_tokens": 1}, "iteration": 3}),
        ("user_input", {"segments": [{"role": "user", "content": [{"type": "trusted-text", "text": "more"}]}],
                        "input_id": 7}),
        ("text", {"text": "done", "iteration": 4}),
        ("usage", {"usage": {"output_tokens": 3}, "iteration": 4}),
        ("done", {"stop_reason": "end_turn"}),
    ]
    return [(i + 1, t, p) for i, (t, p) in enumerate(ev)]


def test_fed_in_any_pieces_the_replay_equals_the_full_replay() -> None:
    events = transcript_events()
    for cut in range(len(events) + 1):
        for second in range(cut, len(events) + 1):
            r = Replayer()
            seen = [r.feed(events[:cut]).transcript(), r.feed(events[cut:second]).transcript(),
                    r.feed(events[second:]).transcript()]
            expected = [replay(events[:cut]), replay(events[:second]), replay(events)]
            assert seen == expected, (cut, second)
            assert (r.fed, r.last_seq) == (len(events), len(events))


def test_a_rendered_transcript_is_not_changed_by_later_events() -> None:
    events = transcript_events()
    r = Replayer().feed(events[:5])  # inside iteration 1's assistant turn
    before = r.transcript()
    snapshot = dataclasses.replace(before, messages=[Message(m.role, list(m.content)) for m in before.messages])
    r.feed(events[5:])
    assert before == snapshot


def test_the_scrub_is_remembered_for_closed_messages_until_its_key_changes() -> None:
    scrubbed: list[str] = []

    def scrub(messages: list[Message]) -> list[Message]:
        out = []
        for m in messages:
            scrubbed.append(m.role)
            out.append(Message(m.role, [TextBlock("x")] if any(isinstance(b, TextBlock) for b in m.content)
                               else list(m.content)))
        return out

    events = transcript_events()
    r = Replayer()
    for n in range(1, len(events) + 1):
        r.feed(events[n - 1:n])
        t = r.transcript()
        assert r.scrubbed(t, "k1", scrub) == scrub(t.messages)
    calls_with_memory = len(scrubbed)
    scrubbed.clear()
    t = r.transcript()
    r.scrubbed(t, "k1", scrub)
    assert scrubbed == ["assistant"]  # only the open turn (the last one): the closed ones are remembered
    scrubbed.clear()
    r.scrubbed(t, "k2", scrub)
    assert len(scrubbed) == len(t.messages)  # a new key (a secret was added): everything again
    assert calls_with_memory > 0
    # a transcript this replayer did not render (rebuilt by a caller) is scrubbed whole
    scrubbed.clear()
    other = replay(events)
    assert r.scrubbed(other, "k2", scrub) == scrub(other.messages)
    assert len(scrubbed) == 2 * len(other.messages)


async def test_a_chained_run_sends_the_model_what_a_full_replay_gives(open_runtime: Any) -> None:
    agent = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 6}}
    # its own agent and tenant: the tool-caller counts in the agent's Memory, which other tests read
    rt, disp = await open_runtime({"replayed": agent}, chain_steps=4, chain_budget_seconds=60)
    sent: list[tuple[list[Message], list[Event], Any]] = []
    inner = rt.engine._call_model

    async def recording(lease: Lease, agent: Any, transcript: Any, iteration: int, retry: Any) -> Any:
        sent.append((list(transcript.messages), list(lease.run.events), lease.replayer))
        return await inner(lease, agent, transcript, iteration, retry)

    rt.engine._call_model = recording
    run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="replayed", segments=[
        {"role": "user", "content": [{"type": "trusted-text", "text": "count"}]}]))
    assert await disp.drain() == 2  # steps 0-3 chained, 4-6 chained after a new message
    stored = await rt.runs.get(TENANT, run.id)
    assert stored is not None and (stored.status, stored.iterations) == ("completed", 7)
    assert len(sent) == 7
    for messages, events, _ in sent:
        assert messages == replay(events).messages
    # one replay state per lease chain: the chained steps fed it only what their commits added
    states = [s for _, _, s in sent]
    assert states[0] is states[1] is states[2] is states[3]
    assert states[4] is not states[3] and states[4] is states[5] is states[6]
    events = await rt.runs.events(TENANT, run.id)
    assert [(s, t, p) for s, t, p in sent[-1][1]] == [(e.seq, e.type, e.payload) for e in events][:len(sent[-1][1])]


async def test_steering_input_queued_mid_chain_is_taken_by_the_next_chained_step(open_runtime: Any) -> None:
    """The chained commit hands the run's `input_seq` back: input queued while a chained step runs
    lands at the top of the next iteration, not after the chain."""
    from treadle.store.inputs import InputStore

    agent = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 5}}
    rt, disp = await open_runtime({"steered_chain": agent}, chain_steps=20, chain_budget_seconds=60)
    inner = rt.engine._call_model
    calls = 0
    run_id = ""

    async def steering(leased: LeasedRun, agent: Any, transcript: Any, iteration: int, retry: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:  # while the second iteration's step runs under the chained lease
            queued = await InputStore(rt.pool).add(TENANT, run_id, "input", "also count this")
            assert queued.input_id is not None
        return await inner(leased, agent, transcript, iteration, retry)

    rt.engine._call_model = steering
    run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="steered_chain", segments=[
        {"role": "user", "content": [{"type": "trusted-text", "text": "count"}]}]))
    run_id = run.id
    assert await disp.drain() == 1  # one chain did it all
    evs = [(e.type, e.payload) for e in await rt.runs.events(TENANT, run.id)]
    steered = next(i for i, (t, p) in enumerate(evs) if t == "user_input" and p.get("source") == "steer")
    # right after the second iteration's tool result, before the third iteration's turn
    assert [t for t, _ in evs[steered - 1:steered + 2]] == ["tool_result", "user_input", "tool_call"]
    assert sum(1 for t, _ in evs[:steered] if t == "usage") == 2


async def _run_on_the_queue(rt: Any, queue: Any, agent: str) -> tuple[str, list[tuple[int, int]], list[Any]]:
    """One run of `agent` on the Postgres queue, one worker: (run id, [(events_after, events read)]
    per claim, [(messages sent, events held, replay state)] per model call)."""
    import treadle.store.steps as steps_module
    from treadle.engine.workers import WorkerPool
    from treadle.testing import until

    claims: list[tuple[int, int]] = []
    sent: list[Any] = []
    leased_from_row = steps_module._leased
    inner = rt.engine._call_model

    def spying(row: dict[str, Any]) -> LeasedRun:
        claims.append((int(row.get("events_after") or 0), len(row["events"])))
        return leased_from_row(row)

    async def recording(lease: Lease, agent: Any, transcript: Any, iteration: int, retry: Any) -> Any:
        sent.append((list(transcript.messages), list(lease.run.events), lease.replayer))
        return await inner(lease, agent, transcript, iteration, retry)

    rt.engine._call_model = recording
    steps_module._leased = spying
    run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent=agent, segments=[
        {"role": "user", "content": [{"type": "trusted-text", "text": "count"}]}]))
    workers = WorkerPool(rt.engine, queue, 1, idle_poll_s=0.05)
    workers.start()
    try:
        async def ended() -> bool:
            got = await rt.runs.get(TENANT, run.id)
            return got is not None and got.terminal

        await until(ended, timeout=60, interval=0.02, what="the run")
    finally:
        await workers.stop()
        steps_module._leased = leased_from_row
    stored = await rt.runs.get(TENANT, run.id)
    assert stored is not None and (stored.status, stored.iterations) == ("completed", 8)
    events = [(e.seq, e.type, e.payload) for e in await rt.runs.events(TENANT, run.id)]
    for messages, held, _ in sent:  # what the model was sent is what a full replay gives
        assert held == events[:len(held)] and messages == replay(held).messages
    return run.id, claims, sent


async def test_a_run_this_process_yielded_is_claimed_back_reading_only_what_came_after(
        open_runtime: Any, migrated_db_url: str) -> None:
    """A worker ends its lease chain every 3 steps and the run goes back to the job queue; the
    claim that takes it back in this process reads none of the transcript it already held
    (store/held.py) and goes on with the same replay state."""
    agent = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 7}}
    rt, queue = await open_runtime({"held": agent}, inline=False, url=migrated_db_url,
                                   chain_steps=3, chain_budget_seconds=60)
    _, claims, sent = await _run_on_the_queue(rt, queue, "held")
    assert len(claims) == 3  # steps 0-2, 3-5, 6-7
    assert claims[0] == (0, 2)  # the first claim reads the whole transcript: user_input, started
    assert all(after > 0 and read == 0 for after, read in claims[1:]), claims
    assert (rt.steps.held.hits, rt.steps.held.misses, len(rt.steps.held)) == (2, 0, 0)
    assert all(state is sent[0][2] for _, _, state in sent)  # one replay state for the whole run


async def test_a_claim_whose_held_transcript_is_gone_reads_it_whole(open_runtime: Any, migrated_db_url: str) -> None:
    agent = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 7}}
    rt, queue = await open_runtime({"forgotten": agent}, inline=False, url=migrated_db_url,
                                   chain_steps=3, chain_budget_seconds=60)
    rt.steps.held.put = lambda run_id, held: None  # marked, then lost (it expired, say)
    _, claims, sent = await _run_on_the_queue(rt, queue, "forgotten")
    assert len(claims) == 3 and all(after > 0 for after, _ in claims[1:])
    assert (rt.steps.held.hits, rt.steps.held.misses) == (0, 2)
    assert sent[3][2] is not sent[2][2]  # the replay started again from the whole transcript


async def test_with_no_room_to_hold_a_transcript_the_job_is_not_marked(open_runtime: Any, migrated_db_url: str) -> None:
    """A backlog longer than the bound: the yielding commit does not mark its job, and the claim
    reads the whole transcript in its one statement, as without held transcripts."""
    agent = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 7}}
    rt, queue = await open_runtime({"no_room": agent}, inline=False, url=migrated_db_url,
                                   chain_steps=3, chain_budget_seconds=60)
    rt.steps.held.max_runs = 0
    _, claims, _ = await _run_on_the_queue(rt, queue, "no_room")
    assert len(claims) == 3 and all(after == 0 and read > 2 for after, read in claims[1:]), claims
    assert (rt.steps.held.hits, rt.steps.held.misses, len(rt.steps.held)) == (0, 0, 0)


async def test_a_lease_chain_shares_one_connection_and_holds_none_while_the_model_answers(
        open_runtime: Any, migrated_db_url: str, monkeypatch: Any) -> None:
    """store/db.py `Pool.holding` / `Pool.released` (issue 32): a step task's statements share the
    connection it holds, which goes back to the pool once a model call has taken longer than
    engine/step.py HOLD_ACROSS_S — a step waiting on its model holds no connection — and is taken
    again at most once per step after it."""
    import asyncio
    from collections import Counter

    from treadle.store.db import _HELD

    agent = {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 7}}
    rt, queue = await open_runtime({"one_conn": agent}, inline=False, url=migrated_db_url,
                                   chain_steps=3, chain_budget_seconds=60)
    takes: Counter[str] = Counter()
    getconn = rt.pool.inner.getconn

    async def counting(*args: Any, **kwargs: Any) -> Any:
        task = asyncio.current_task()
        takes[task.get_name() if task is not None else ""] += 1
        return await getconn(*args, **kwargs)

    held_in_model_calls: list[object] = []
    call_model = rt.engine._call_model

    async def looking(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.05)  # a model that takes its time (past HOLD_ACROSS_S)
        held = _HELD.get()
        held_in_model_calls.append("no holding" if held is None else held.conn)
        return await call_model(*args, **kwargs)

    # the budget check's tenant list is re-read once a second (governance/limits.py): on a slow
    # machine that read lands inside a step; it is not the step's own work, read it once here
    await rt.limits.tenants_with_limits()
    monkeypatch.setattr(rt.limits, "refresh_s", float("inf"))
    monkeypatch.setattr(rt.pool.inner, "getconn", counting)
    monkeypatch.setattr(rt.engine, "_call_model", looking)
    _, leases, sent = await _run_on_the_queue(rt, queue, "one_conn")
    assert len(leases) == 3 and len(sent) == 8  # 3 chains ran the run's 8 steps
    assert held_in_model_calls == [None] * 8, held_in_model_calls  # held, and given back, at each call
    step_takes = {name: n for name, n in takes.items() if name.startswith("treadle-step-")}
    # one take per step, after its model call (its statements before the call reuse the chain's),
    # and one more: the last step, which ends the turn, reads the input queue (store/inputs.py,
    # not step work) through a connection of its own
    assert step_takes and sum(step_takes.values()) == 8 + 1, takes


async def test_a_held_connection_is_lent_only_to_its_task_and_only_while_idle(open_runtime: Any) -> None:
    import asyncio

    rt, _ = await open_runtime({"idle": {"model": "echo"}})
    pool = rt.pool
    async with pool.holding():
        async with pool.step_connection() as held:
            pass
        async with pool.step_connection() as again:
            assert again is held
        await held.execute("BEGIN")  # inside a transaction: a pooled connection instead
        async with pool.step_connection() as other:
            assert other is not held
        await held.execute("ROLLBACK")

        async def elsewhere() -> Any:
            async with pool.step_connection() as conn:
                return conn

        assert await asyncio.create_task(elsewhere()) is not held  # another task: its own
        async with pool.step_transaction() as tx:
            assert tx.conn is held
            async with pool.step_connection() as inside:  # inside the step transaction: its connection
                assert inside is held
        from treadle.store.db import _HELD

        async with pool.released(after_s=10.0):  # a wait that ends first keeps the connection
            pass
        loan = _HELD.get()
        assert loan is not None and loan.conn is held
        async with pool.released(after_s=0.01):  # a longer one gives it back meanwhile
            await asyncio.sleep(0.05)
            assert loan.conn is None
        async with pool.step_connection() as again:  # and the next step statement takes one again
            assert loan.conn is again

    assert _HELD.get() is None  # the block's end took the loan back


def test_the_replay_keeps_what_a_step_would_scan_the_transcript_for() -> None:
    """Transcript.tool_ids, has_thinking and consumed_input_id, kept as events are fed, are what
    a scan of the whole transcript gives — at every cut."""
    from treadle.engine.waiting import consumed_input_id

    events = [*transcript_events(), (20, "turn_cancelled", {"input_id": 9})]
    for cut in range(len(events) + 1):
        t = Replayer().feed(events[:cut]).transcript()
        assert set(t.tool_ids) == {tu.id for m in t.messages for tu in m.tool_uses()}
        assert t.has_thinking == any(isinstance(b, ThinkingBlock) for m in t.messages for b in m.content)
        assert t.consumed_input_id == consumed_input_id(events[:cut])
    assert t.consumed_input_id == 9 and t.has_thinking and set(t.tool_ids) == {"t1", "t2", "t3", "t4"}


async def test_a_model_reusing_a_tool_id_of_the_transcript_gets_a_new_one() -> None:
    """engine/routing.py: the ids the replay keeps (Call.tool_ids) refuse a reused id as the scan did."""
    from treadle.domain.content import ToolUseBlock
    from treadle.engine.routing import Call, _unique_tool_ids
    from treadle.providers.base import ModelResponse, Usage

    def response() -> ModelResponse:
        return ModelResponse(content=[ToolUseBlock("t1", "Memory", {}), ToolUseBlock("new", "Memory", {}),
                                      ToolUseBlock("new", "Memory", {})], stop_reason="tool_use", usage=Usage())

    t = Replayer().feed(transcript_events()).transcript()
    known = Call(run_id="r", agent="a", iteration=5, system="", messages=t.messages, request={}, history=[],
                 tool_ids=t.tool_ids)
    scanned = Call(run_id="r", agent="a", iteration=5, system="", messages=t.messages, request={}, history=[])
    ids = []
    for call in (known, scanned):
        r = response()
        _unique_tool_ids(r, call)
        ids.append([b.id for b in r.content if isinstance(b, ToolUseBlock)])
    assert ids[0] == ids[1] and ids[0][1] == "new" and ids[0][0] not in t.tool_ids and ids[0][2] != "new"
    assert set(t.tool_ids) == {"t1", "t2", "t3", "t4"}  # the replay's set is not changed
