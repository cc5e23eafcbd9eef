"""Resident sub-agents (`Agent` ops open/send/poll/cancel/close, loomcycle's RFC BK): a child that
stays alive between messages as an interactive run parked for input, its parent parked (holding
nothing) while a turn runs; idle children close at their TTL, a parent's end closes its residents."""

from __future__ import annotations

import json
from typing import Any

from tests.support.e2e import query
from tests.support.waiting import ECHO, answer, asker, children, events, scripted, start, status, tool_results, types
from treadle.engine.workers import Sweeper

ASK = {"tool": "Interruption", "input": {"op": "ask", "question": "proceed?", "options": ["yes", "no"]}}
#: a child whose every turn asks a question first (it is mid-turn until answered)
ASKS_EVERY_TURN = scripted([ASK, {"text": "asked"}, ASK, {"text": "asked again"}, ASK, {"text": "asked thrice"}],
                           ["Interruption"])


def results(evs: list[Any]) -> list[dict[str, Any]]:
    """Every tool result's JSON (an error's text as {"error": text})."""
    out = []
    for r in tool_results(evs):
        out.append({"error": r["text"]} if r["is_error"] else json.loads(r["text"]))
    return out


def agent(op: str, **fields: Any) -> dict[str, Any]:
    return {"tool": "Agent", "input": {"op": op, **fields}}


CHILD = "$result.child_run_id"


async def resident_rows(rt: Any, parent: str) -> list[dict[str, Any]]:
    return await query(rt.database_url, "SELECT run_id, closed_at, close_reason, idle_ttl_s FROM resident_children"
                       " WHERE parent_run_id = %s ORDER BY created_at", (parent,))


async def test_open_send_poll_close_drive_a_child_that_keeps_its_conversation(open_runtime: Any) -> None:
    turns = [
        agent("open", name="echo", prompt="first words", idle_ttl_seconds=60),
        agent("send", child_run_id=CHILD, prompt="second words"),
        agent("poll", child_run_id=CHILD),
        agent("send", child_run_id=CHILD, prompt="third words"),
        agent("close", child_run_id=CHILD),
        {"text": "done"},
    ]
    rt, disp = await open_runtime({"p": scripted(turns, ["Agent"]), "echo": ECHO})
    parent = await start(rt, "p")
    await disp.drain()
    assert await status(rt, parent) == "completed"
    opened, sent, polled, sent2, closed = results(await events(rt, parent))
    child = opened["child_run_id"]
    assert opened == {"child_run_id": child, "state": "awaiting_input", "output": "first words"}
    assert sent == {"child_run_id": child, "state": "awaiting_input", "output": "second words"}
    assert polled == {"child_run_id": child, "state": "awaiting_input", "output": "second words"}
    assert sent2["output"] == "third words"
    assert closed == {"child_run_id": child, "state": "closed", "output": ""}
    [kid] = await children(rt, parent)
    assert kid["id"] == child and kid["depth"] == 1 and kid["root_run_id"] == parent
    assert kid["status"] == "cancelled" and kid["cancel_reason"] == "closed by parent"
    # one run, three turns: the child saw its whole conversation
    child_evs = await events(rt, child)
    assert [e.payload["text"] for e in child_evs if e.type == "text"] == ["first words", "second words",
                                                                          "third words"]
    assert types(child_evs).count("awaiting_input") == 3
    [row] = await resident_rows(rt, parent)
    assert row["close_reason"] == "closed by parent" and row["idle_ttl_s"] == 60


async def test_while_a_turn_runs_the_parent_is_parked_and_the_child_holds_nothing(open_runtime: Any) -> None:
    turns = [agent("open", name="asker", prompt="go"), agent("send", child_run_id=CHILD, prompt="again"),
             {"text": "done"}]
    rt, disp = await open_runtime({"p": scripted(turns, ["Agent"]), "asker": asker()})
    parent = await start(rt, "p")
    await disp.drain()
    [kid] = await children(rt, parent)
    for run_id in (parent, kid["id"]):  # the child asks a question mid-turn; the parent waits on it
        run = await rt.runs.get("default", run_id)
        assert run.status == "waiting" and run.lease_owner is None
    assert disp.queue == []
    assert types(await events(rt, parent))[-1] == "tool_parked"
    await answer(rt, kid["id"], "yes")
    await disp.drain()
    # open answered; send: the child is a script that says "asked" for every later turn
    opened, sent = results(await events(rt, parent))[:2]
    assert opened["state"] == "awaiting_input" and opened["output"] == "asked"
    assert sent["state"] == "awaiting_input"
    assert await status(rt, parent) == "completed"


async def test_send_with_timeout_zero_answers_at_once_and_poll_waits_for_the_turn(open_runtime: Any) -> None:
    turns = [
        agent("open", name="asker", prompt="go"),
        {"tool": "Agent", "input": {"op": "poll", "child_run_id": CHILD, "timeout_ms": 0}},
        {"tool": "Agent", "input": {"op": "poll", "child_run_id": CHILD, "timeout_ms": 60_000}},
        {"text": "done"},
    ]
    # open parks until the first turn ends: the child asks (mid-turn) → answer it → open answers
    rt, disp = await open_runtime({"p": scripted(turns, ["Agent"]), "asker": asker()})
    parent = await start(rt, "p")
    await disp.drain()
    [kid] = await children(rt, parent)
    await answer(rt, kid["id"])
    await disp.drain()
    opened, snap, waited = results(await events(rt, parent))
    assert opened["state"] == snap["state"] == waited["state"] == "awaiting_input"

    # send with timeout_ms 0 answers "running" at once; the turn runs on
    turns2 = [agent("open", name="echo", prompt="a"), agent("send", child_run_id=CHILD, prompt="b", timeout_ms=0),
              agent("poll", child_run_id=CHILD, timeout_ms=60_000), {"text": "done"}]
    rt2, disp2 = await open_runtime({"p": scripted(turns2, ["Agent"]), "echo": ECHO})
    parent2 = await start(rt2, "p")
    await disp2.drain()
    opened, sent, polled = results(await events(rt2, parent2))
    assert sent == {"child_run_id": opened["child_run_id"], "state": "running", "output": ""}
    assert polled["state"] == "awaiting_input" and polled["output"] == "b"


async def test_errors_have_stable_codes(open_runtime: Any) -> None:
    turns = [
        agent("send", child_run_id="r_nope", prompt="x"),
        agent("open", name="ghost", prompt="x"),
        agent("open", name="echo", prompt=""),
        agent("open", name="echo", prompt="x", idle_ttl_seconds=-1),
        agent("poll"),
        agent("open", name="asker", prompt="q"),
        agent("send", child_run_id=CHILD, prompt="while busy"),
        {"text": "end"},
    ]
    rt, disp = await open_runtime({"p": scripted(turns, ["Agent"]), "echo": ECHO, "asker": asker()},
                                  provider_retries=0)
    parent = await start(rt, "p")
    await disp.drain()
    # the open of `asker` parks until its first turn ends: answer its question, then the send is refused
    [kid] = await children(rt, parent)
    evs = await events(rt, parent)
    errors = [r["error"].split(":")[0] for r in results(evs) if "error" in r]
    assert errors == ["resident_not_found", "unknown_agent", "missing_field", "invalid_field", "missing_field"]
    await answer(rt, kid["id"])
    await disp.drain()
    # the child answered its question and parked; an interactive asker asks again only on its next turn
    out = results(await events(rt, parent))
    assert out[5]["state"] == "awaiting_input"
    assert out[6]["state"] in ("awaiting_input", "running")


async def test_a_send_to_a_busy_child_is_refused(open_runtime: Any) -> None:
    turns = [
        agent("open", name="asker", prompt="q"),
        agent("send", child_run_id=CHILD, prompt="one", timeout_ms=0),
        agent("send", child_run_id=CHILD, prompt="two"),
        agent("cancel", child_run_id=CHILD),
        agent("send", child_run_id=CHILD, prompt="three", timeout_ms=0),
        agent("close", child_run_id=CHILD),
        agent("send", child_run_id=CHILD, prompt="four"),
        agent("close", child_run_id=CHILD),
        {"text": "end"},
    ]
    rt, disp = await open_runtime({"p": scripted(turns, ["Agent"]), "asker": ASKS_EVERY_TURN})
    parent = await start(rt, "p")
    await disp.drain()
    [kid] = await children(rt, parent)
    await answer(rt, kid["id"])  # its first turn asks; answered, the open returns
    await disp.drain()
    # "one" is delivered (timeout 0); the child's second turn asks again: mid-turn
    out = results(await events(rt, parent))
    assert out[1]["state"] == "running"
    assert out[2]["error"].startswith("resident_busy:")
    # cancel stops that turn: the child parks for input again, alive
    assert out[3]["state"] == "awaiting_input"
    assert out[4]["state"] == "running"
    assert out[5]["state"] == "closed"
    assert out[6]["error"].startswith("resident_closed:")
    assert out[7]["state"] == "closed"  # idempotent
    assert await status(rt, parent) == "completed"
    child_types = types(await events(rt, kid["id"]))
    assert "turn_cancelled" in child_types and child_types[-1] == "done"


async def test_a_parents_end_closes_its_residents_and_its_turn_cancel_does_not(open_runtime: Any) -> None:
    turns = [agent("open", name="echo", prompt="a"), agent("open", name="echo", prompt="b"), {"text": "bye"}]
    rt, disp = await open_runtime({"p": scripted(turns, ["Agent"]), "echo": ECHO})
    parent = await start(rt, "p")
    await disp.drain()
    assert await status(rt, parent) == "completed"
    kids = await children(rt, parent)
    assert len(kids) == 2
    assert {k["status"] for k in kids} == {"cancelled"}
    assert {k["cancel_reason"] for k in kids} == {"parent run ended"}
    assert {r["close_reason"] for r in await resident_rows(rt, parent)} == {"parent run ended"}


async def test_idle_children_close_at_their_ttl(open_runtime: Any) -> None:
    turns = [agent("open", name="echo", prompt="a", idle_ttl_seconds=30),
             agent("open", name="echo", prompt="b", idle_ttl_seconds=3600),
             {"tool": "Interruption", "input": {"op": "ask", "question": "hold on?"}}, {"text": "bye"}]
    rt, disp = await open_runtime({"p": scripted(turns, ["Agent", "Interruption"]), "echo": ECHO})
    parent = await start(rt, "p")
    await disp.drain()
    assert await status(rt, parent) == "waiting"  # parked on its question, both residents open
    short, long_ = await resident_rows(rt, parent)
    sweeper = Sweeper(rt.engine, disp, 1.0, wake_due=rt.wake_due)
    await sweeper.sweep_once()
    assert all(r["closed_at"] is None for r in await resident_rows(rt, parent))
    # 31 s go by (the clocks move, nothing sleeps): the short one's TTL passed, the long one's did not
    await query(rt.database_url, "UPDATE resident_children SET last_used_at = last_used_at - interval '31 s'"
                " WHERE parent_run_id = %s", (parent,))
    await query(rt.database_url, "UPDATE runs SET updated_at = updated_at - interval '31 s'"
                " WHERE parent_run_id = %s", (parent,))
    await sweeper.sweep_once()
    await disp.drain()
    rows = {r["run_id"]: r for r in await resident_rows(rt, parent)}
    assert rows[short["run_id"]]["close_reason"] == "idle timeout"
    assert rows[long_["run_id"]]["closed_at"] is None
    assert await status(rt, short["run_id"]) == "cancelled"
    assert await status(rt, long_["run_id"]) == "waiting"


async def test_cap_and_depth_follow_spawns_rules(open_runtime: Any) -> None:
    turns = [agent("open", name="echo", prompt="a"), agent("open", name="echo", prompt="b"), {"text": "end"}]
    rt, disp = await open_runtime({"p": scripted(turns, ["Agent"], max_resident_children=1), "echo": ECHO})
    parent = await start(rt, "p")
    await disp.drain()
    first, second = results(await events(rt, parent))
    assert first["state"] == "awaiting_input"
    assert second["error"].startswith("resident_cap:")

    nest = scripted([agent("open", name="nest", prompt="go"), {"text": "done"}], ["Agent"])
    rt2, disp2 = await open_runtime({"nest": nest})
    root = await start(rt2, "nest")
    await disp2.drain()
    chain, run_id = [], root
    while kids := await children(rt2, run_id):
        [kid] = kids
        chain.append(kid["depth"])
        run_id = kid["id"]
    assert chain == [1, 2, 3]
    [deepest] = results(await events(rt2, run_id))
    assert deepest["error"].startswith("max_depth:")


async def test_a_parents_turn_cancel_leaves_its_residents_alive(open_runtime: Any) -> None:
    from treadle.api.steering import cancel_turn

    turns = [agent("open", name="echo", prompt="a"), ASK, {"text": "bye"}]
    rt, disp = await open_runtime({"p": scripted(turns, ["Agent", "Interruption"]), "echo": ECHO})
    parent = await start(rt, "p", interactive=True)
    await disp.drain()
    [kid] = await children(rt, parent)
    assert await status(rt, parent) == "waiting" and await status(rt, kid["id"]) == "waiting"
    await cancel_turn(rt, "default", parent, "changed my mind")
    await disp.drain()
    assert "turn_cancelled" in types(await events(rt, parent))
    assert await status(rt, kid["id"]) == "waiting"  # the resident outlives its parent's turn
    [row] = await resident_rows(rt, parent)
    assert row["closed_at"] is None
    await rt.cancel_run("default", parent, "stop")  # the parent's cancel takes its subtree
    await disp.drain()
    assert await status(rt, kid["id"]) == "cancelled"
    [row] = await resident_rows(rt, parent)
    assert row["close_reason"] == "parent run ended"


async def test_the_sweeper_closes_residents_whose_parent_ended_without_closing_them(open_runtime: Any) -> None:
    """A crash between the parent's final commit and closing its residents: the sweeper closes them."""
    turns = [agent("open", name="echo", prompt="a"), {"text": "bye"}]
    rt, disp = await open_runtime({"p": scripted(turns, ["Agent"]), "echo": ECHO})
    parent = await start(rt, "p")
    rt.engine.steering.close_residents = _lost
    await disp.drain()
    assert await status(rt, parent) == "completed"
    [kid] = await children(rt, parent)
    assert kid["status"] == "waiting"
    await Sweeper(rt.engine, disp, 1.0, wake_due=rt.wake_due).sweep_once()
    await disp.drain()
    assert await status(rt, kid["id"]) == "cancelled"
    [row] = await resident_rows(rt, parent)
    assert row["close_reason"] == "parent run ended"


async def _lost(*_args: Any) -> None:
    return None


async def test_a_turn_cancel_that_lands_while_a_step_parks_on_a_tool_is_not_lost(open_runtime: Any) -> None:
    """The cancel of a resident's turn (or any interactive run's) queued after the step was leased —
    its poke found the run running, not parked — and before the step parked on its tool: the park
    does not hold, the next step takes the cancel (store/steps.py `_commit_parking`)."""
    from treadle.store.inputs import InputStore

    rt, disp = await open_runtime({"asker": ASKS_EVERY_TURN})
    run_id = await start(rt, "asker", interactive=True)
    original = rt.steps._commit_parking
    raced: list[int] = []

    async def racing(*args: Any, **kw: Any) -> Any:
        if not raced:  # the first park of the run: the turn cancel lands just before it commits
            queued = await InputStore(rt.pool).add("default", run_id, "turn_cancel", "stop")
            raced.append(int(queued.input_id or 0))
        return await original(*args, **kw)

    rt.steps._commit_parking = racing
    await disp.drain()
    assert raced and raced[0] > 0
    evs = await events(rt, run_id)
    assert "turn_cancelled" in types(evs) and types(evs)[-1] == "awaiting_input"
    assert await status(rt, run_id) == "waiting"
    pending = await query(rt.database_url, "SELECT status FROM interrupts WHERE run_id = %s", (run_id,))
    assert [p["status"] for p in pending] == ["cancelled"]


async def test_a_snapshot_carries_a_parked_resident_and_it_goes_on_in_the_other_treadle(
    open_runtime: Any, migrated_db_url: str, target_db: str
) -> None:
    from tests.support.tenancy import api

    agents = {"p": scripted([agent("open", name="echo", prompt="a"), ASK,
                             agent("send", child_run_id=CHILD, prompt="b"), {"text": "done"}],
                            ["Agent", "Interruption"]), "echo": ECHO}
    src, disp = await open_runtime(agents, url=migrated_db_url)
    parent = await start(src, "p")
    await disp.drain()
    [kid] = await children(src, parent)
    assert await status(src, parent) == "waiting" and await status(src, kid["id"]) == "waiting"
    async with api(src) as c:
        r = await c.post("/v1/_snapshots", json={"label": "residents"})
        assert r.status_code == 201, r.text
        doc = (await c.get(f"/v1/_snapshots/{r.json()['id']}/export")).json()
    [row] = doc["sections"]["resident_children"]["entries"]
    assert row["run_id"] == kid["id"] and row["parent_run_id"] == parent and row["closed_at"] is None

    dst, disp2 = await open_runtime(agents, url=target_db)
    async with api(dst) as c:
        r = await c.post("/v1/_snapshots/elsewhere/restore", json={"json": doc})
        assert r.status_code == 200, r.text
        listed = (await c.get("/v1/_resident")).json()["resident"]
        assert [(x["child_run_id"], x["state"]) for x in listed] == [(kid["id"], "awaiting_input")]
    await answer(dst, parent)  # the parent's question, answered in the other treadle: it sends, then ends
    await disp2.drain()
    assert await status(dst, parent) == "completed"
    last = json.loads(tool_results(await events(dst, parent))[-1]["text"])
    assert last == {"child_run_id": kid["id"], "state": "awaiting_input", "output": "b"}
    assert await status(dst, kid["id"]) == "cancelled"  # the parent's end closed it


async def test_open_honours_a_compaction_override_and_refuses_a_bad_one(open_runtime: Any) -> None:
    turns = [agent("open", name="echo", prompt="a", compaction={"keep_last_n": 3}),
             agent("open", name="echo", prompt="b", compaction={"target_percentage": 99}), {"text": "end"}]
    rt, disp = await open_runtime({"p": scripted(turns, ["Agent"]), "echo": ECHO})
    parent = await start(rt, "p")
    await disp.drain()
    first, second = results(await events(rt, parent))
    assert first["state"] == "awaiting_input"
    assert second["error"].startswith("invalid_field: Agent.open: compaction")
    run = await rt.runs.get("default", first["child_run_id"])
    assert (run.run_options or {}).get("compaction") == {"keep_last_n": 3}


async def test_a_turn_cancel_stored_just_after_a_step_parked_on_a_tool_wakes_it(open_runtime: Any) -> None:
    """The other side of the race above: the cancel's poke read the run's keys while it still ran
    (none) and its row is stored just after the step parked on its tool — the engine's look right
    after a park (engine/waiting.py `cancel_if_requested`) wakes it, and the cancel is taken."""
    from treadle.store.inputs import InputStore

    rt, disp = await open_runtime({"asker": ASKS_EVERY_TURN})
    run_id = await start(rt, "asker", interactive=True)
    original = rt.steps._commit_parking
    raced: list[int] = []

    async def racing(*args: Any, **kw: Any) -> Any:
        committed = await original(*args, **kw)
        if not raced:  # stored after the park committed; its own poke (the input key) wakes nothing
            queued = await InputStore(rt.pool).add("default", run_id, "turn_cancel", "stop")
            raced.append(int(queued.input_id or 0))
            await rt.poke("default", [f"input:{run_id}"])
        return committed

    rt.steps._commit_parking = racing
    await disp.drain()
    assert raced and raced[0] > 0
    evs = await events(rt, run_id)
    assert "turn_cancelled" in types(evs) and types(evs)[-1] == "awaiting_input"
    pending = await query(rt.database_url, "SELECT status FROM interrupts WHERE run_id = %s", (run_id,))
    assert [p["status"] for p in pending] == ["cancelled"]
