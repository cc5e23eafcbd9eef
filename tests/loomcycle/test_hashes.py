"""AgentDef / SkillDef content_sha256 equal to loomcycle's (internal/agents/sign.go,
internal/skills/sign.go). The expected values are loomcycle's own pinned vectors
(internal/agents/sign_test.go) or sha256 over JSON bytes written out by hand from Go's
encoding/json rules (struct fields in declaration order, omitempty, `<`,`>`,`&` as \\u003c…,
non-ASCII raw, floats shortest, map keys sorted) — never treadle's own output."""

from __future__ import annotations

import hashlib
from typing import Any

from tests.support.substrate import client_for, substrate_runtime
from treadle.domain.loomhash import agent_sha256, go_float, skill_sha256


def go_bytes_hash(json_text: str) -> str:
    return "sha256:" + hashlib.sha256(json_text.encode()).hexdigest()


def test_loomcycles_pinned_vectors() -> None:
    # TestSign_KnownVector
    assert agent_sha256("researcher", {"system_prompt": "be thorough", "tools": ["WebFetch", "Read"],
                                       "max_tokens": 8192}) == \
        "sha256:e03953f0f2b43b6e9521b0c5e3f31cdddad6c3d3e907deb8172cd4c959de105e"
    # TestSign_KnownVectorWithModels
    models = {"high": [{"provider": "anthropic", "model": "claude-opus-4-5"},
                       {"provider": "openai", "model": "gpt-5-2025-08-07"}],
              "low": [{"provider": "deepseek", "model": "deepseek-chat"}]}
    assert agent_sha256("researcher", {"models": models}) == \
        "sha256:c23827d24ac610aa96718ea32a8e3c22783c3beb1ad3cc0830165ba82f9fc701"
    # Sign on a zero AgentContent is the hash of "{}"; normalize() drops empty slices and trims
    assert agent_sha256("", {}) == go_bytes_hash("{}")
    assert agent_sha256("x", {"tools": [], "system_prompt": "p \n\r\n"}) == \
        go_bytes_hash('{"name":"x","system_prompt":"p"}')


def test_escaping_order_and_normalisation() -> None:
    definition = {"description": "Résumé <draft> & notes", "system_prompt": "Line 1\r\nLine 2 \t\r\n\n",
                  "max_iterations": 5, "tools": ["Memory", "Context"], "memory_scopes": ["user"],
                  "tier": "middle", "provider": "", "max_concurrent_children": 0}
    expected = ('{"description":"Résumé \\u003cdraft\\u003e \\u0026 notes","max_iterations":5,'
                '"memory_scopes":["user"],"name":"doc/summarizer","system_prompt":"Line 1\\nLine 2",'
                '"tier":"middle","tools":["Memory","Context"]}')
    assert agent_sha256("doc/summarizer", definition) == go_bytes_hash(expected)


def test_nested_structs_keep_declaration_order_and_pointer_zeroes() -> None:
    definition = {
        "sampling": {"stop": ["END"], "seed": 7, "top_p": 1.0, "temperature": 0.0},  # temperature 0 is kept
        "compaction": {"keep_first": False, "enabled": True, "target_percentage": 20},
        "channels": {"subscribe": ["alerts"], "publish": []},
        "interruption": {"max_pending": 2, "enabled": True},
        "core_blocks": [{"label": "persona", "read_only": True}, {"label": "", "scope": "user", "limit_bytes": 64}],
        "unbounded_iterations": True,
    }
    expected = ('{"channels":{"subscribe":["alerts"]},'
                '"compaction":{"enabled":true,"target_percentage":20,"keep_first":false},'
                '"core_blocks":[{"label":"persona","read_only":true},{"label":"","scope":"user","limit_bytes":64}],'
                '"interruption":{"enabled":true,"max_pending":2},"name":"planner",'
                '"sampling":{"temperature":0,"top_p":1,"seed":7,"stop":["END"]},"unbounded_iterations":true}')
    assert agent_sha256("planner", definition) == go_bytes_hash(expected)
    # all-empty nested blocks collapse away
    assert agent_sha256("planner", {"sampling": {}, "channels": {"publish": []}, "interruption": {}}) == \
        go_bytes_hash('{"name":"planner"}')


def test_go_float_formatting() -> None:
    assert [go_float(f) for f in (0.2, 1.0, 1e-5, 1e-7, 2e21, 123456789.0, 0.1 + 0.2)] == \
        ["0.2", "1", "0.00001", "1e-7", "2e+21", "123456789", "0.30000000000000004"]


def test_skill_hash() -> None:
    expected = ('{"body":"Cite sources.\\n\\n- always","description":"a \\u003cb\\u003e","name":"cite",'
                '"tools":["Memory"]}')
    assert skill_sha256("cite", "Cite sources.\r\n\r\n- always \n\n", "a <b>", ["Memory"]) == go_bytes_hash(expected)
    assert skill_sha256("cite", "Body") == go_bytes_hash('{"body":"Body","name":"cite"}')


async def test_agentdef_and_skilldef_rows_carry_loomcycles_hash(migrated_db_url: str) -> None:
    config: dict[str, Any] = {"agents": {"writer": {"system_prompt": "You write.\r\n", "tools": ["Memory"],
                                                    "max_tokens": 1024, "description": "writes <things>"}},
                              "skills": {"style": {"body": "Be terse. ", "description": "style"}}}
    async with substrate_runtime(migrated_db_url, config) as (rt, _disp), client_for(rt) as c:
        yaml_agent = (await c.post("/v1/_agentdef", json={"op": "get", "name": "writer"})).json()
        assert yaml_agent["content_sha256"] == go_bytes_hash(
            '{"description":"writes \\u003cthings\\u003e","max_tokens":1024,"name":"writer",'
            '"system_prompt":"You write.","tools":["Memory"]}')
        created = (await c.post("/v1/_agentdef", json={"op": "create", "name": "planner", "overlay": {
            "system_prompt": "Plan.", "sampling": {"temperature": 0.5}, "max_iterations": 3}})).json()
        assert created["content_sha256"] == go_bytes_hash(
            '{"max_iterations":3,"name":"planner","sampling":{"temperature":0.5},"system_prompt":"Plan."}')
        # a field written out with its default value is hashed, as loomcycle (omitempty only drops zeros)
        explicit = (await c.post("/v1/_agentdef", json={"op": "create", "name": "explicit", "overlay": {
            "system_prompt": "Plan.", "max_tokens": 4096}})).json()
        assert explicit["content_sha256"] == go_bytes_hash(
            '{"max_tokens":4096,"name":"explicit","system_prompt":"Plan."}')
        verified = (await c.post("/v1/_agentdef", json={"op": "verify", "name": "planner",
                                                        "content_sha256": created["content_sha256"]})).json()
        assert verified["matches"] is True
        skill = (await c.post("/v1/_skilldef", json={"op": "get", "name": "style"})).json()
        assert skill["content_sha256"] == go_bytes_hash('{"body":"Be terse.","description":"style","name":"style"}')


async def test_rows_hashed_before_0018_get_loomcycles_hash_and_keep_theirs(migrated_db_url: str) -> None:
    from treadle.store.defs import DefStore
    from treadle.substrate.agentdefs import agent_content_sha256

    body = {"system_prompt": "Old.", "tools": ["Memory"]}
    old = agent_content_sha256(body)
    async with substrate_runtime(migrated_db_url, {}) as (rt, _disp):
        # a row as migration 0018 leaves one written before it: treadle's hash in both columns
        await DefStore(rt.pool).create("default", "agent", "legacy", body, old, treadle_sha256=old)
    async with substrate_runtime(migrated_db_url, {}) as (rt, _disp), client_for(rt) as c:
        row = (await c.post("/v1/_agentdef", json={"op": "get", "name": "legacy"})).json()
        assert row["content_sha256"] == go_bytes_hash('{"name":"legacy","system_prompt":"Old.","tools":["Memory"]}')
        assert row["treadle_sha256"] == old
        verified = (await c.post("/v1/_agentdef", json={"op": "verify", "name": "legacy",
                                                        "content_sha256": old})).json()
        assert verified["matches"] is True and verified["treadle_sha256"] == old
