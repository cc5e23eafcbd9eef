"""Skills on demand (tool Skill): `/`-grouped names, the `skills:` pattern allowlist (loomcycle's
skillmatch rules), list/invoke through a real run, versions pinned at the run's start, no
widening of the agent's tools, and bundling of plain names kept as before."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.substrate import client_for, ok_results, run_agent, scripted, tool_results
from treadle.config import parse_config
from treadle.domain import skillmatch
from treadle.errors import ConfigError

SKILLS = {
    "review/security": {"body": "Check the inputs.", "description": "security review", "tools": ["Memory"]},
    "review/secret": {"body": "Hidden."},
    "review/deep/style": {"body": "Deep style."},
    "doc/redactor": {"body": "Redact names.", "tools": ["HTTP"]},
}


@pytest.mark.parametrize(("patterns", "name", "ok"), [
    (["review/*"], "review/security", True),
    (["review/*"], "review/deep/style", False),
    (["review/**"], "review/deep/style", True),
    (["review/*", "-review/secret"], "review/secret", False),
    (["-review/secret"], "doc/redactor", True),
    ([], "anything", True),
    (["-*"], "doc/redactor", False),
    (["+doc/none"], "doc/redactor", False),
    (["seo"], "seo", True),
    (["rev?ew/sec*"], "review/security", True),
])
def test_allowlist_rules(patterns: list[str], name: str, ok: bool) -> None:
    assert skillmatch.allowed(patterns, name) is ok


def test_names_and_patterns_are_checked_in_yaml() -> None:
    cfg = parse_config({"skills": {"team/structure": {"body": "x"}},
                        "agents": {"a": {"skills": ["team/*", "-team/secret", "team/structure"]}}})
    assert "Skill" not in cfg.agents["a"].tools  # added at resolve time, never written into the config
    for bad_name in ("team//x", "team/../x", "a b"):
        with pytest.raises(ConfigError, match="skills"):
            parse_config({"skills": {bad_name: {"body": "x"}}})
    with pytest.raises(ConfigError, match=r"agents\.a\.skills\.0"):
        parse_config({"agents": {"a": {"skills": ["team/**/x y"]}}})


async def test_skill_tool_lists_invokes_and_pins(open_rt: Any) -> None:
    reader = scripted(
        ("Skill", {"op": "list"}),
        ("Skill", {"op": "list", "pattern": "review/*"}),
        ("Skill", {"name": "review/security"}),
        ("Skill", {"op": "invoke", "name": "review/secret"}),
        ("Skill", {"op": "invoke", "name": "doc/redactor"}),
        ("Skill", {"op": "invoke", "name": "review/deep/style"}),
        ("Skill", {"op": "invoke", "name": "review/none"}),
        ("Skill", {"op": "nope"}),
        tools=["Memory"], skills=["review/**", "doc/*", "-review/secret"])
    plain = {"model": "echo", "system_prompt": "P.", "skills": ["review/security"]}
    config = {"agents": {"reader": reader, "plain": plain}, "skills": SKILLS}
    rt, disp = await open_rt(config)
    assert "Skill" in rt.catalogue.get("reader").tools_by_name
    assert "Skill" not in rt.catalogue.get("plain").tools_by_name

    run = await run_agent(rt, disp, "reader")
    assert run.status == "completed"
    assert run.skill_def_ids == {"review/security": "yaml", "review/deep/style": "yaml", "doc/redactor": "yaml"}
    results = await tool_results_text(rt, run.id)
    listed, filtered = [(err, json.loads(text)) for err, text in results[:2]]
    security, secret, redactor, deep, unknown, bad_op = results[2:]
    assert listed == (False, {"skills": [{"name": "doc/redactor"}, {"name": "review/deep/style"},
                                         {"description": "security review", "name": "review/security"}]})
    assert filtered == (False, {"skills": [{"description": "security review", "name": "review/security"}]})
    assert security == (False, "Check the inputs.")
    assert secret[0] and "not permitted" in secret[1]
    assert redactor[0] and "cannot widen" in redactor[1] and "HTTP" in redactor[1]
    assert deep == (False, "Deep style.")
    assert unknown[0] and "unknown skill 'review/none'" in unknown[1]
    assert bad_op[0] and "unknown op" in bad_op[1]


async def test_skilldef_with_slash_names_pins_per_run(open_rt: Any) -> None:
    reader = scripted(("Skill", {"name": "team/structure"}), skills=["team/*"])
    author = scripted(("SkillDef", {"op": "create", "name": "team/own", "overlay": {"body": "Own."}}),
                      ("SkillDef", {"op": "create", "name": "other/x", "overlay": {"body": "No."}}),
                      skills=["team/*"], skill_def_scopes=["self"])
    rt, disp = await open_rt({"agents": {"reader": reader, "author": author}})
    async with client_for(rt) as c:
        v1 = (await c.post("/v1/_skilldef", json={"op": "create", "name": "team/structure",
                                                   "overlay": {"body": "Version one."}})).json()
        assert v1["name"] == "team/structure" and v1["version"] == 1
        bad = await c.post("/v1/_skilldef", json={"op": "create", "name": "team//x", "overlay": {"body": "x"}})
        assert bad.status_code == 422 and "empty" in bad.json()["error"], bad.json()
    first = await run_agent(rt, disp, "reader")
    assert first.skill_def_ids == {"team/structure": v1["def_id"]}
    async with client_for(rt) as c:
        await c.post("/v1/_skilldef", json={"op": "fork", "name": "team/structure", "promote": True,
                                            "overlay": {"body": "Version two."}})
    second = await run_agent(rt, disp, "reader")
    assert [r for _, r in await tool_results_text(rt, first.id)] == ["Version one."]
    assert [r for _, r in await tool_results_text(rt, second.id)] == ["Version two."]

    created, refused = await tool_results(rt, (await run_agent(rt, disp, "author")).id)
    assert not created[0] and created[1]["name"] == "team/own"  # `self` covers what skills: admits
    assert refused[0] and "outside this agent's skill_def_scopes" in refused[1]


async def tool_results_text(rt: Any, run_id: str) -> list[tuple[bool, str]]:
    return [(e.payload["is_error"], e.payload["text"]) for e in await rt.runs.events("default", run_id)
            if e.type == "tool_result"]


async def test_context_lists_the_skill_tool_it_adds(open_rt: Any) -> None:
    agent = scripted(("Context", {"op": "tools"}), ("Context", {"op": "help", "topic": "skills"}),
                     tools=["Context"], skills=["review/*"])
    rt, disp = await open_rt({"agents": {"a": agent}, "skills": SKILLS})
    tools, help_text = await ok_results(rt, (await run_agent(rt, disp, "a")).id)
    assert [t["name"] for t in tools["tools"]] == ["Context", "Skill"]
    assert tools["tools"][1]["input_schema"]["properties"]["op"]["enum"] == ["invoke", "list"]
    assert "review/*" in help_text["text"] and '"op": "invoke"' in help_text["text"]


async def test_a_whitelist_adds_loomcycles_run_start_note(open_rt: Any) -> None:
    from tests.substrate.test_defs_tool import RecordingMock

    recorder = RecordingMock()
    agents = {"picky": {"model": "echo", "system_prompt": "P.", "skills": ["review/*", "-review/secret"]},
              "open": {"model": "echo", "system_prompt": "P.", "skills": ["-review/secret"]},
              "plain": {"model": "echo", "system_prompt": "P.", "skills": ["review/security"]}}
    rt, disp = await open_rt({"agents": agents, "skills": SKILLS}, providers={"mock": recorder})
    for name in ("picky", "open", "plain"):
        await run_agent(rt, disp, name)
    picky, open_, plain = recorder.systems[-3:]
    assert picky.startswith("P.\n\n---\n\nSkills available on demand (matching: review/*). Use the `Skill` tool")
    assert open_ == "P."  # a blacklist: no note (the model lists what there is)
    assert plain == "P.\n\n## Skill: review/security\n\nCheck the inputs."  # bundled, no Skill tool
