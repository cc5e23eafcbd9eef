"""Evaluation through the tool (scripted, with the run ids filled in at call time) and over HTTP:
every op, the scopes, attribution to defs and lineage, tenants."""

from __future__ import annotations

from typing import Any

from tests.support.substrate import TENANT, TemplatingMock, client_for, ok_results, run_agent, scripted, tool_results

WORKER = {"model": "echo", "system_prompt": "work"}


async def _worker_def(c: Any) -> dict[str, Any]:
    created = await c.post("/v1/_agentdef", json={"op": "create", "name": "worker", "overlay": WORKER})
    result: dict[str, Any] = created.json()
    return result


async def test_every_op_through_the_tool(open_rt: Any) -> None:
    mock = TemplatingMock()
    judge = scripted(
        ("Evaluation", {"op": "submit", "run_id": "$VAR.target", "score": 0.8, "dimensions": {"accuracy": 1,
                        "style": 0.5}, "judgement": "pass", "rationale": "mostly right"}),
        ("Evaluation", {"op": "get", "eval_id": "$RESULT.eval_id"}),
        ("Evaluation", {"op": "list_for_run", "run_id": "$VAR.target"}),
        ("Evaluation", {"op": "list_for_def", "def_id": "$VAR.def_id"}),
        ("Evaluation", {"op": "aggregate", "name": "worker"}),
        evaluation_scopes=["submit_any", "read_any"],
    )
    rt, disp = await open_rt({"agents": {"judge": judge}}, providers={"mock": mock})
    async with client_for(rt) as c:
        wdef = await _worker_def(c)
    work = await run_agent(rt, disp, "worker")
    mock.vars.update(target=work.id, def_id=wdef["def_id"])
    judge_run = await run_agent(rt, disp, "judge")
    submitted, got, for_run, for_def, agg = await ok_results(rt, judge_run.id)
    assert submitted["eval_id"].startswith("ev_") and submitted["def_id"] == wdef["def_id"]
    assert submitted["emitter_role"] == "unrelated" and submitted["emitter_run_id"] == judge_run.id
    assert submitted["def_content_sha256"] == wdef["content_sha256"] and submitted["agent"] == "worker"
    assert got == submitted
    assert [e["eval_id"] for e in for_run["evaluations"]] == [submitted["eval_id"]]
    assert for_def["count"] == 1
    assert agg["defs"] == [{"def_id": wdef["def_id"], "count": 1, "mean": 0.8, "min": 0.8, "max": 0.8,
                            "dimensions": {"accuracy": 1.0, "style": 0.5}, "name": "worker", "version": 1,
                            "content_sha256": wdef["content_sha256"]}]
    assert agg["overall"] == {"count": 1, "mean": 0.8}


async def test_scopes_self_descendants_and_default_deny(open_rt: Any) -> None:
    mock = TemplatingMock()
    agents = {
        "worker": WORKER,
        "selfish": scripted(("Evaluation", {"op": "submit", "run_id": "$RUN", "score": 1}),
                            ("Evaluation", {"op": "submit", "run_id": "$VAR.other", "score": 1}),
                            ("Evaluation", {"op": "list_for_run", "run_id": "$VAR.other"}),
                            ("Evaluation", {"op": "aggregate", "name": "worker"}),
                            ("Evaluation", {"op": "aggregate", "name": "selfish"}),
                            evaluation_scopes=["submit_self"]),
        "boss": scripted(("Agent", {"op": "spawn", "name": "worker", "prompt": "do it"}),
                         ("Evaluation", {"op": "submit", "run_id": "$RESULT.run_id", "score": 0.25}),
                         ("Evaluation", {"op": "list_for_run", "run_id": "$RESULT.run_id"}),
                         evaluation_scopes=["submit_descendants"]),
        "mute": scripted(("Evaluation", {"op": "get", "eval_id": "ev_x"}), evaluation_scopes=[]),
    }
    rt, disp = await open_rt({"agents": agents}, providers={"mock": mock})
    other = await run_agent(rt, disp, "worker")
    mock.vars["other"] = other.id
    own, foreign, peek, agg_other, agg_own = await tool_results(rt, (run := await run_agent(rt, disp, "selfish")).id)
    assert not own[0] and own[1]["emitter_role"] == "self" and own[1]["run_id"] == run.id
    assert foreign[0] and "needs evaluation_scopes submit_any" in foreign[1]
    assert peek[0] and "outside this agent's evaluation_scopes" in peek[1]
    assert agg_other[0] and "read_any" in agg_other[1]
    assert not agg_own[0] and agg_own[1]["overall"] == {"count": 1, "mean": 1.0}

    spawned, graded, listed = await tool_results(rt, (await run_agent(rt, disp, "boss")).id)
    assert not spawned[0] and not graded[0] and graded[1]["emitter_role"] == "parent"
    assert graded[1]["run_id"] == spawned[1]["run_id"] and graded[1]["def_id"] is None  # a yaml worker
    assert not listed[0] and listed[1]["count"] == 1

    [denied] = await tool_results(rt, (await run_agent(rt, disp, "mute")).id)
    assert denied[0] and "default-deny" in denied[1]


async def test_every_op_over_http_with_lineage(open_rt: Any) -> None:
    rt, disp = await open_rt({"agents": {}})
    async with client_for(rt) as c:
        v1 = await _worker_def(c)
        r1 = await run_agent(rt, disp, "worker")
        v2 = (await c.post("/v1/_agentdef", json={"op": "fork", "name": "worker", "promote": True,
                                                  "overlay": {"system_prompt": "work harder"}})).json()
        r2 = await run_agent(rt, disp, "worker")
        assert (r1.def_id, r2.def_id) == (v1["def_id"], v2["def_id"])

        async def ev(body: dict[str, Any], status: int = 200) -> Any:
            resp = await c.post("/v1/_evaluation", json=body)
            assert resp.status_code == status, resp.text
            return resp.json()

        e1 = await ev({"op": "submit", "run_id": r1.id, "score": 0.4, "dimensions": {"speed": 2}})
        await ev({"op": "submit", "run_id": r2.id, "score": 0.9, "dimensions": {"speed": 4}})
        await ev({"op": "submit", "run_id": r2.id, "score": 0.7})
        assert e1["emitter_role"] == "external" and e1["emitter_agent"] is None
        assert (await ev({"op": "get", "eval_id": e1["eval_id"]}))["score"] == 0.4
        assert (await ev({"op": "list_for_run", "run_id": r2.id}))["count"] == 2
        assert (await ev({"op": "list_for_def", "def_id": v2["def_id"]}))["count"] == 2
        assert (await ev({"op": "list_for_def", "def_id": v2["def_id"], "include_lineage": True}))["count"] == 3

        only_v2 = await ev({"op": "aggregate", "def_id": v2["def_id"]})
        assert [(d["version"], d["count"], d["mean"]) for d in only_v2["defs"]] == [(2, 2, 0.8)]
        lineage = await ev({"op": "aggregate", "def_id": v2["def_id"], "include_lineage": True})
        by_version = {d["version"]: d for d in lineage["defs"]}
        assert by_version[1]["mean"] == 0.4 and by_version[2]["mean"] == 0.8
        assert by_version[1]["dimensions"] == {"speed": 2.0} and by_version[2]["dimensions"] == {"speed": 4.0}
        assert lineage["overall"] == {"count": 3, "mean": 0.666667}
        assert (await ev({"op": "aggregate", "name": "worker"}))["overall"]["count"] == 3
        active = (await c.post("/v1/_agentdef", json={"op": "get", "name": "worker"})).json()
        assert active["def_id"] == v2["def_id"]  # scores never promote anything

        for body, status, code in [
            ({"op": "submit", "run_id": r1.id}, 422, "tool_refused"),
            ({"op": "submit", "run_id": r1.id, "score": "high"}, 422, "tool_refused"),
            ({"op": "submit", "run_id": r1.id, "score": 1, "dimensions": {"bad key": 1}}, 422, "tool_refused"),
            ({"op": "submit", "run_id": "r_missing", "score": 1}, 404, "run_not_found"),
            ({"op": "get", "eval_id": "ev_missing"}, 404, "not_found"),
            ({"op": "aggregate"}, 422, "tool_refused"),
            ({"op": "aggregate", "def_id": "def_missing"}, 404, "not_found"),
            ({"op": "rank"}, 422, "tool_refused"),
        ]:
            assert (await ev(body, status))["code"] == code, body


async def test_another_tenants_evaluations_are_invisible(open_rt: Any) -> None:
    rt, disp = await open_rt({"agents": {"worker": WORKER}})
    theirs = await run_agent(rt, disp, "worker", tenant="tenant-b")
    service = rt.substrate.evaluations
    ev = await service.dispatch("tenant-b", {"op": "submit", "run_id": theirs.id, "score": 1})
    async with client_for(rt) as c:
        assert (await c.post("/v1/_evaluation", json={"op": "get", "eval_id": ev["eval_id"]})).status_code == 404
        listed = await c.post("/v1/_evaluation", json={"op": "list_for_run", "run_id": theirs.id})
        assert listed.status_code == 404
        submit = await c.post("/v1/_evaluation", json={"op": "submit", "run_id": theirs.id, "score": 0})
        assert submit.status_code == 404
        agg = (await c.post("/v1/_evaluation", json={"op": "aggregate", "name": "worker"})).json()
        assert agg["overall"]["count"] == 0
    assert TENANT != "tenant-b"


async def test_judgement_is_free_form_json_as_in_loomcycle(open_rt: Any) -> None:
    """loomcycle's Evaluation.submit `judgement` is a json.RawMessage (evaluation.go), ≤ 32 KiB by
    default; a string still works."""
    rt, disp = await open_rt({"agents": {}})
    async with client_for(rt) as c:
        await _worker_def(c)
        run = await run_agent(rt, disp, "worker")
        for judgement in ({"verdict": "pass", "checks": [1, 2, {"ok": True}]}, ["a", "b"], "pass", 3):
            resp = await c.post("/v1/_evaluation", json={"op": "submit", "run_id": run.id, "score": 1,
                                                         "judgement": judgement})
            assert resp.status_code == 200, resp.text
            assert resp.json()["judgement"] == judgement
            got = await c.post("/v1/_evaluation", json={"op": "get", "eval_id": resp.json()["eval_id"]})
            assert got.json()["judgement"] == judgement
        big = await c.post("/v1/_evaluation", json={"op": "submit", "run_id": run.id, "score": 1,
                                                    "judgement": {"x": "y" * 33_000}})
        assert big.status_code == 422 and "32768 bytes" in big.text, big.text
