"""TeamDef on the def lifecycle: loomcycle's graph validation (a code per invalid class, nothing
stored), its content hash (colours excluded), Mermaid rendering, the HTTP routes the TS client
uses, and team runs walking the graph with child runs, parked between states."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.substrate import client_for, run_agent, scripted, tool_results
from tests.support.teams import AGENTS, REVIEW_TEAM, players
from treadle.domain.events import EventType
from treadle.teams.graph import INVALID_CODES, parse, validate
from treadle.teams.hashing import team_content_json, team_sha256
from treadle.teams.render import render_mermaid
from treadle.teams.svg import render_svg


def _mutated(**changes: Any) -> dict[str, Any]:
    d = copy.deepcopy(REVIEW_TEAM)
    d.update(changes)
    return d


_S = REVIEW_TEAM["states"]
_T = REVIEW_TEAM["transitions"]
INVALID = {
    "team_invalid_definition": _mutated(stats=[]),
    "team_entry_missing": _mutated(entry="nowhere"),
    "team_no_states": _mutated(states=[], transitions=[]),
    "team_duplicate_state": _mutated(states=[*_S, _S[0]]),
    "team_invalid_handler": _mutated(states=[{"state": "write", "handler": {"kind": "boss", "agent": "w"}}, *_S[1:]]),
    "team_parallel_without_consolidator": _mutated(states=[_S[0], {"state": "review", "handler": {
        "kind": "parallel", "agents": ["a", "b"]}}, _S[2]]),
    "team_dangling_transition": _mutated(transitions=[*_T, {"from": "write", "to": "ghost", "on": "pushback:x"}]),
    "team_invalid_edge": _mutated(transitions=[*_T[:2], {"from": "review", "to": "done", "on": "yes"}]),
    "team_ambiguous_transition": _mutated(transitions=[*_T, {"from": "review", "to": "write", "on": "success"}]),
    "team_terminal_has_transitions": _mutated(transitions=[*_T, {"from": "done", "to": "write", "on": "success"}]),
    "team_unreachable_state": _mutated(states=[*_S, {"state": "island", "handler": {"kind": "terminal"}}]),
    "team_dead_end": _mutated(transitions=[_T[0], {"from": "write", "to": "done", "on": "pushback:skip"}]),
    "team_cap_out_of_range": _mutated(max_iterations=1001),
}


def test_every_invalid_class_has_a_case() -> None:
    assert set(INVALID) == set(INVALID_CODES)


def test_hash_is_loomcycles_and_ignores_colours() -> None:
    d = parse(REVIEW_TEAM)
    assert team_content_json("review", d) == (
        '{"name":"review","entry":"write","max_iterations":3,"states":['
        '{"state":"write","handler":{"kind":"agent","agent":"writer"}},'
        '{"state":"review","handler":{"kind":"parallel","agents":["reviewer-a","reviewer-b"],'
        '"consolidator":"editor"}},{"state":"done","handler":{"kind":"terminal"}}],"transitions":['
        '{"from":"write","to":"review","on":"success"},{"from":"review","to":"write","on":"pushback:rework"},'
        '{"from":"review","to":"done","on":"success"}]}')
    recoloured = parse(_mutated(colors={"states": {"write": "red"}, "transitions": {"success": "#123"}}))
    assert team_sha256("review", recoloured) == team_sha256("review", d)
    assert team_sha256("other", d) != team_sha256("review", d)
    no_edges = parse({"entry": "a", "states": [{"state": "a", "handler": {"kind": "terminal"}}]})
    assert team_content_json("t", no_edges).endswith('"transitions":null}')


def test_mermaid_rendering() -> None:
    d = parse(REVIEW_TEAM)
    validate(d)
    out = render_mermaid("review", d, "review")
    assert out.splitlines()[:7] == [
        "stateDiagram-v2", "  %% review", "  [*] --> write", "  write --> review: success",
        "  review --> write: pushback:rework", "  review --> done: success", "  done --> [*]"]
    assert "    parallel: reviewer-a, reviewer-b (wait: all)" in out
    assert "  classDef ca5d8ff fill:#a5d8ff,color:#111,stroke:#1c7ed6" in out  # explicit blue on write
    assert "  class review cfcc2d7_hl" in out  # the keyword "review" → pink, highlighted
    hostile = parse({"entry": "a\n  x --> [*]", "states": [{"state": "a\n  x --> [*]", "handler": {
        "kind": "terminal"}}], "colors": {"states": {"a\n  x --> [*]": "red; } classDef evil"}}})
    assert "\n  x" not in render_mermaid("t", hostile) and "evil" not in render_mermaid("t", hostile)


def test_svg_rendering_lays_out_every_state_and_outlines_the_current_one() -> None:
    import xml.etree.ElementTree as ET

    d = parse(REVIEW_TEAM)
    svg = ET.fromstring(render_svg("review", d, "review"))  # well-formed XML
    ns = {"s": "http://www.w3.org/2000/svg"}
    groups = {g.get("data-state"): g for g in svg.iterfind("s:g", ns)}
    assert set(groups) == {"write", "review", "done"}
    assert [k for k, g in groups.items() if "current" in (g.get("class") or "")] == ["review"]
    boxes = {k: g.find("s:rect", ns) for k, g in groups.items()}
    y = {k: float(b.get("y") or 0) for k, b in boxes.items() if b is not None}
    assert y["write"] < y["review"] < y["done"]  # ranked down the forward edges; the pushback loops back
    assert boxes["review"] is not None and boxes["review"].get("stroke-width") == "3.5"
    assert boxes["review"].get("fill") == "#fcc2d7" and boxes["write"] is not None  # the Mermaid colours
    assert boxes["write"].get("fill") == "#a5d8ff"
    texts = ["".join(t.itertext()) for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert {"pushback:rework", "success", "parallel: reviewer-a, reviewer-b", "wait: all"} <= set(texts)
    assert len(svg.findall("s:path", ns)) == 4  # start arrow, 2 forward edges, 1 loop-back
    # names are text, never markup
    hostile = parse({"entry": "<script>", "states": [{"state": "<script>", "handler": {"kind": "terminal"}}]})
    out = render_svg("</svg><script>alert(1)</script>", hostile, "<script>")
    assert "<script" not in out and ET.fromstring(out) is not None


async def test_authoring_over_http(open_rt: Any) -> None:
    rt, _ = await open_rt({"agents": AGENTS}, providers={"players": players()})
    async with client_for(rt) as c:
        for code, bad in INVALID.items():
            resp = await c.post("/v1/_teamdef", json={"op": "create", "name": "review", "overlay": bad})
            assert resp.status_code == 422, (code, resp.text)
            assert resp.json()["code"] == "tool_refused" and resp.json()["reason"] == code, resp.json()
        assert (await c.get("/v1/_teamdef/names")).json() == {"names": []}  # nothing stored

        created = (await c.post("/v1/_teamdef", json={"op": "create", "name": "review",
                                                      "overlay": REVIEW_TEAM})).json()
        assert created["version"] == 1 and created["promoted"] is True
        assert created["content_sha256"] == team_sha256("review", parse(REVIEW_TEAM))
        got = (await c.post("/v1/_teamdef", json={"op": "get", "def_id": created["def_id"]})).json()
        assert got["definition"]["states"][1]["handler"]["consolidator"] == "editor" and got["retired"] is False
        verify = (await c.post("/v1/_teamdef", json={"op": "verify", "name": "review",
                                                     "content_sha256": created["content_sha256"]})).json()
        assert verify["matches"] is True
        recolour = (await c.post("/v1/_teamdef", json={"op": "fork", "name": "review", "overlay": {
            "colors": {"states": {"write": "green"}}}})).json()
        assert recolour["version"] == 2 and recolour["content_sha256"] == created["content_sha256"]
        dry = (await c.post("/v1/_teamdef", json={"op": "render_diagram", "overlay": REVIEW_TEAM})).json()
        assert dry["preview"] is True and dry["diagram"].startswith("stateDiagram-v2\n  %% team\n")
        stored = (await c.post("/v1/_teamdef", json={"op": "render_diagram", "name": "review",
                                                     "highlight_state": "write"})).json()
        assert stored["def_id"] == created["def_id"] and "class write ca5d8ff_hl" in stored["diagram"]
        refused = await c.post("/v1/_teamdef", json={"op": "run", "name": "review", "board_chunk_id": "c1"})
        assert refused.status_code == 422 and refused.json()["code"] == "unsupported_field"
        names = (await c.get("/v1/_teamdef/names")).json()["names"]
        assert [(n["name"], n["version_count"], n["active_def_id"], n["latest_version"]) for n in names] == [
            ("review", 2, created["def_id"], 2)]
        listed = (await c.post("/v1/_teamdef", json={"op": "list", "name": "review"})).json()
        assert listed["name"] == "review" and [v["version"] for v in listed["versions"]] == [2, 1]
        unretire = await c.post("/v1/_teamdef", json={"op": "retire", "def_id": created["def_id"], "retired": False})
        assert unretire.status_code == 422 and "un-retiring" in unretire.text
        deleted = (await c.post("/v1/_teamdef", json={"op": "delete", "name": "review"})).json()
        assert deleted == {"name": "review", "deleted": True, "versions": 2}
        gone = await c.post("/v1/_teamdef", json={"op": "render_diagram", "name": "review"})
        assert gone.status_code == 404, gone.text


async def test_a_team_run_walks_the_graph_with_child_runs(open_rt: Any) -> None:
    rt, disp = await open_rt({"agents": AGENTS}, providers={"players": players()})
    async with client_for(rt) as c:
        await c.post("/v1/_teamdef", json={"op": "create", "name": "review", "overlay": REVIEW_TEAM})
        started = (await c.post("/v1/_teamdef", json={"op": "run", "name": "review", "input": "write about owls",
                                                      "wait": False})).json()
        assert started["status"] == "running"
        await disp.drain()
        result = (await c.post("/v1/_teamdef", json={"op": "run", "name": "review", "input": "x",
                                                     "wait": False})).json()  # a second run, left queued
    assert result["status"] == "running"
    answer = await rt.teams.result("default", started["run_id"], 1)
    assert answer["status"] == "completed", answer
    assert answer["final_state"] == "done" and answer["final_output"] == "approved: draft v2"
    assert [(s["state"], s["edge"], s["next"]) for s in answer["steps"]] == [
        ("write", "success", "review"), ("review", "pushback:rework", "write"),
        ("write", "success", "review"), ("review", "success", "done")]
    kids = [r for r in await rt.runs.list_runs("default", None, 100) if r.parent_run_id == started["run_id"]]
    # per visit: write → 1 child; review → 2 reviewers + the editor
    assert sorted(r.agent for r in kids) == sorted(["writer"] * 2 + ["reviewer-a", "reviewer-b", "editor"] * 2)
    assert all(r.status == "completed" for r in kids)
    async with client_for(rt) as c:
        where = (await c.post("/v1/_teamdef", json={"op": "render_diagram", "run_id": started["run_id"]})).json()
    assert where["state"] == "done" and where["run_status"] == "completed"
    assert "class done c99e9f2_hl" in where["diagram"]
    team_run = await rt.runs.get("default", started["run_id"])
    assert team_run is not None and team_run.agent == "team:review"
    assert team_run.def_content_sha256 == team_sha256("review", parse(REVIEW_TEAM))


async def test_the_teamdef_tool_runs_a_team_parked(open_rt: Any) -> None:
    lead = scripted(("TeamDef", {"op": "create", "name": "review", "overlay": REVIEW_TEAM}),
                    ("TeamDef", {"op": "run", "name": "review", "input": "owls"}),
                    ("TeamDef", {"op": "create", "name": "bad", "overlay": INVALID["team_dead_end"]}))
    rt, disp = await open_rt({"agents": {**AGENTS, "lead": lead}}, providers={"players": players()})
    done = await run_agent(rt, disp, "lead")
    assert done.status == "completed"
    created, ran, refused = await tool_results(rt, done.id)
    assert not created[0] and not ran[0], ran
    assert ran[1]["status"] == "completed" and ran[1]["final_output"] == "approved: draft v2"
    assert refused[0] and "dead end" in refused[1]
    team_run = await rt.runs.get("default", ran[1]["run_id"])
    assert team_run is not None and team_run.parent_run_id == done.id


@pytest.mark.parametrize("answer", ["continue", "abort", "reroute:done"])
async def test_a_cap_asks_a_human(open_rt: Any, answer: str) -> None:
    stubborn = _mutated(max_iterations=1)
    rt, disp = await open_rt({"agents": {**AGENTS}}, providers={"players": players()})
    async with client_for(rt) as c:
        await c.post("/v1/_teamdef", json={"op": "create", "name": "review", "overlay": stubborn})
        started = (await c.post("/v1/_teamdef", json={"op": "run", "name": "review", "input": "owls",
                                                      "interrupt_on_cap": True, "wait": False})).json()
        asked = 0
        await disp.drain()
        while (run := await rt.runs.get("default", started["run_id"])) is not None and run.status == "waiting":
            pending = (await c.get(f"/v1/runs/{run.id}/interrupts")).json()
            items = pending.get("interrupts", pending) if isinstance(pending, dict) else pending
            items = [i for i in items if i["status"] == "pending"]
            assert len(items) == 1 and "iteration cap" in items[0]["question"]
            where = (await c.post("/v1/_teamdef", json={"op": "render_diagram", "run_id": run.id})).json()
            assert where["run_status"] == "waiting" and where["state"] == ("write" if asked == 0 else "review")
            assert f"class {where['state']} " in where["diagram"] and "_hl\n" in where["diagram"]
            resolved = await c.post(f"/v1/runs/{run.id}/interrupts/{items[0]['interrupt_id']}/resolve",
                                    json={"answer": answer})
            assert resolved.status_code < 300, resolved.text
            asked += 1
            await disp.drain()
    assert run is not None
    result = await rt.teams.result("default", run.id, 1)
    # max_iterations 1: write is capped on its second visit; after `continue` review is, once
    assert result.get("cap_decision") == answer and result["interruptions"] == asked == (2 if answer == "continue"
                                                                                          else 1), result
    expected = {"continue": "completed", "abort": "iteration_cap", "reroute:done": "completed"}[answer]
    assert result["status"] == expected, json.dumps(result)
    if answer == "reroute:done":  # straight to the end, with the last state's output
        assert result["final_state"] == "done" and result["final_output"] == "please rework the intro"


async def test_a_team_is_a_run_target(open_rt: Any) -> None:
    rt, disp = await open_rt({"agents": AGENTS}, providers={"players": players()})
    async with client_for(rt) as c:
        await c.post("/v1/_teamdef", json={"op": "create", "name": "review", "overlay": REVIEW_TEAM})
        started = await c.post("/v1/runs", json={"team": "review", "prompt": "owls"})
        assert started.status_code == 202, started.text
        for bad in ({"team": "review", "agent": "writer", "prompt": "x"}, {"prompt": "x"}):
            refused = await c.post("/v1/runs", json=bad)
            assert refused.status_code == 422 and "exactly one of agent or team" in refused.text
        unknown = await c.post("/v1/runs", json={"team": "nope", "prompt": "x"})
        assert unknown.status_code == 400 and "unknown team 'nope'" in unknown.text
        await disp.drain()
        run = (await c.get(f"/v1/runs/{started.json()['run_id']}")).json()
    assert run["status"] == "completed" and run["agent"] == "team:review"
    result = await rt.teams.result("default", run["run_id"] if "run_id" in run else run["id"], 1)
    assert result["final_output"] == "approved: draft v2"


async def test_yaml_teams_are_the_static_base(open_rt: Any) -> None:
    rt, disp = await open_rt({"agents": AGENTS, "teams": {"review": REVIEW_TEAM}}, providers={"players": players()})
    async with client_for(rt) as c:
        names = (await c.get("/v1/_teamdef/names")).json()["names"]
        assert [(n["name"], n.get("source")) for n in names] == [("review", "yaml")]
        clash = await c.post("/v1/_teamdef", json={"op": "create", "name": "review", "overlay": REVIEW_TEAM})
        assert clash.status_code == 422 and "treadle.yaml" in clash.text
        started = await c.post("/v1/runs", json={"team": "review", "prompt": "owls"})
        assert started.status_code == 202, started.text
        await disp.drain()
        result = await rt.teams.result("default", started.json()["run_id"], 1)
        assert result["status"] == "completed"
        got = (await c.post("/v1/_teamdef", json={"op": "get", "def_id": result["def_id"]})).json()
        static = (await c.post("/v1/_teamdef", json={"op": "get", "name": "review"})).json()
    # the yaml team was recorded as a version, then pinned by the run
    assert got["description"] == "from treadle.yaml" and got["version"] == 1
    assert static["source"] == "yaml" and static["content_sha256"] == got["content_sha256"]


async def test_an_invalid_yaml_team_stops_the_start(open_rt: Any) -> None:
    from treadle.errors import ConfigError

    with pytest.raises(ConfigError, match=r"teams\.review: invalid TeamDef: .*dead end"):
        await open_rt({"agents": AGENTS, "teams": {"review": INVALID["team_dead_end"]}},
                      providers={"players": players()})


async def test_a_state_whose_agent_fails_ends_the_walk_failed(open_rt: Any) -> None:
    ghost = _mutated(states=[{"state": "write", "handler": {"kind": "agent", "agent": "ghost-writer"}}, *_S[1:]])
    rt, disp = await open_rt({"agents": AGENTS}, providers={"players": players()})
    async with client_for(rt) as c:
        await c.post("/v1/_teamdef", json={"op": "create", "name": "review", "overlay": ghost})
        started = (await c.post("/v1/_teamdef", json={"op": "run", "name": "review", "input": "owls",
                                                      "wait": False})).json()
        await disp.drain()
    result = await rt.teams.result("default", started["run_id"], 1)
    assert result["status"] == "failed" and "ghost-writer" in result["error"] and result["steps"] == [], result


def test_cli_prints_a_yaml_teams_hash(tmp_path: Path) -> None:
    cfg = tmp_path / "treadle.yaml"
    cfg.write_text(yaml.safe_dump({"agents": {"writer": {"model": "echo"}}, "teams": {"review": REVIEW_TEAM}}))
    out = subprocess.run([sys.executable, "-m", "treadle.cli.main", "--config", str(cfg), "hash", "team", "review"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == team_sha256("review", parse(REVIEW_TEAM))


@pytest.mark.parametrize("wait", ["any", "at_least:2"])
async def test_parallel_wait_cancels_the_rest_once_enough_succeeded(open_rt: Any, wait: str) -> None:
    # loomcycle's runParallel: `any` (or the Nth success of at_least:N) cancels the siblings still
    # running; `slow` parks on a question nobody answers, so only that cancel ends the state
    slow = scripted(("Interruption", {"op": "ask", "question": "never answered", "options": ["a"]}))
    agents = {**AGENTS, "slow": slow}
    fan = {"entry": "fan", "states": [
        {"state": "fan", "handler": {"kind": "parallel", "agents": ["reviewer-a", "slow", "reviewer-b"],
                                     "consolidator": "editor", "wait": wait}},
        {"state": "done", "handler": {"kind": "terminal"}}],
        "transitions": [{"from": "fan", "to": "done", "on": "success"}]}
    rt, disp = await open_rt({"agents": agents}, providers={"players": players()})
    async with client_for(rt) as c:
        created = await c.post("/v1/_teamdef", json={"op": "create", "name": "fan", "overlay": fan})
        assert created.status_code == 200, created.text
        started = (await c.post("/v1/_teamdef", json={"op": "run", "name": "fan", "input": "draft v2",
                                                      "wait": False})).json()
        await disp.drain()
    answer = await rt.teams.result("default", started["run_id"], 5)
    assert answer["status"] == "completed", answer
    kids = {r.agent: r for r in await rt.runs.list_runs("default", None, 100)
            if r.parent_run_id == started["run_id"]}
    assert kids["slow"].status == "cancelled"
    need = 1 if wait == "any" else 2
    assert sum(kids[a].status == "completed" for a in ("reviewer-a", "reviewer-b")) >= need
    # the consolidator read slow as ok:false, cancelled (loomcycle's envelope)
    editor_events = await rt.runs.events("default", kids["editor"].id)
    read = json.loads(next(e.payload["segments"][0]["content"][0]["text"] for e in editor_events
                           if e.type == EventType.USER_INPUT))
    by_agent = {r["agent"]: r for r in read["results"]}
    assert by_agent["slow"]["ok"] is False and by_agent["slow"]["error"].startswith("cancelled: parallel_spawn")
    assert sum(by_agent[a]["ok"] for a in ("reviewer-a", "reviewer-b")) >= need
