"""A yaml written in loomcycle's format (keys from loomcycle's internal/config/config.go and
docs/CONFIGURATION.md) loads unchanged; loomcycle keys treadle does not have fail with one
message each; the routing keys treadle honours (provider_priority, user_tiers, defaults,
loomcycle's provider ids) route as loomcycle's resolver does (CONFIGURATION.md §2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from treadle.builtins.registry import default_registry
from treadle.config import load_config, parse_config
from treadle.engine.agents import resolve_agents
from treadle.engine.model_routes import agent_refs
from treadle.errors import ConfigError
from treadle.providers.registry import build_providers

LOOMCYCLE_YAML = """
provider_priority: [ollama-local, deepseek, anthropic, ollama]
models:
  haiku:  { provider: anthropic, model: claude-haiku-4-5 }
  sonnet: { provider: anthropic, model: claude-sonnet-4-6 }
  cloud-kimi: { provider: ollama, model: kimi-k2.6 }
  local-small: { provider: ollama-local, model: gemma4:9b }
tiers:
  low:
    - { provider: openai, model: gpt-5.4-mini }      # openai is not on provider_priority: skipped
    - haiku
    - local-small
  middle:
    - sonnet
    - { provider: deepseek, model: deepseek-v4-pro }
user_tiers:
  default:
    provider_priority: [ollama-local, deepseek, anthropic, ollama]
    fallback_on_error: true
    max_fallback_attempts: 3
  free:
    provider_priority: [ollama-local]
    tiers:
      low: [local-small]
      middle: [local-small]
    fallback_on_error: false
defaults:
  provider: mock
  model: mock-generic
channels:
  findings:
    scope: agent
    default_ttl: 86400
    max_messages: 10000
    semantic: queue
interruption:
  backend: webui
  default_timeout_ms: 3600000
  max_timeout_ms: 86400000
  max_pending_per_run: 10
  heartbeat_interval_ms: 30000
hooks:
  permit_host_widen:
    owners: []
memory_backends: {}
change_subscriptions: {}
document_sources: {}
agents:
  greeter:
    system_prompt: "Say hello."
  doc/summarizer:
    tier: middle
    unbounded_iterations: true
    sampling: { temperature: 0.2, top_p: 0.9, stop: ["END"] }
    tools: [Memory]
    memory_scopes: [user]
  triage:
    tier: low
    system_prompt: "Classify."
"""


def test_a_loomcycle_yaml_loads_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "loomcycle.yaml"
    path.write_text(LOOMCYCLE_YAML)
    config = load_config(path)
    # loomcycle's provider ids need no `providers:` entry; `ollama` is hosted, `ollama-local` local
    assert {p: config.providers[p].driver for p in ("anthropic", "deepseek", "ollama", "ollama-local")} == {
        "anthropic": "anthropic", "deepseek": "deepseek", "ollama": "ollama_cloud", "ollama-local": "ollama"}
    assert config.agents["greeter"].provider == "mock" and config.agents["greeter"].model == "mock-generic"
    assert config.channels["findings"].default_ttl == 86400
    summarizer = config.agents["doc/summarizer"]
    assert summarizer.unbounded_iterations and summarizer.sampling is not None
    assert summarizer.sampling.model_dump(exclude_none=True) == {"temperature": 0.2, "top_p": 0.9, "stop": ["END"]}


def test_provider_priority_and_user_tiers_route_like_loomcycle() -> None:
    config = parse_config(yaml.safe_load(LOOMCYCLE_YAML))

    def route(agent: str, user_tier: str | None = None) -> list[tuple[str, str]]:
        return [(r.provider, r.model) for _, r in agent_refs(config, agent, user_tier)]

    # `default` user tier: its provider order walks the tier's candidates; openai is not allowed
    assert route("triage") == [("ollama-local", "gemma4:9b"), ("anthropic", "claude-haiku-4-5")]
    assert route("doc/summarizer") == [("deepseek", "deepseek-v4-pro"), ("anthropic", "claude-sonnet-4-6")]
    # `free`: its own tier lists, ollama-local only, no fallback
    assert route("doc/summarizer", "free") == [("ollama-local", "gemma4:9b")]
    assert config.knows_user_tier("free") and not config.knows_user_tier("low")  # user_tiers, not tiers


def test_unsupported_loomcycle_keys_fail_with_one_message_each() -> None:
    data = yaml.safe_load(LOOMCYCLE_YAML)
    data.update({
        "concurrency": {"max_concurrent_runs": 4, "max_queue_depth": 8},  # honoured (test_concurrency.py)
        "storage": {"backend": "sqlite", "sqlmem_root": "/var/lib/sqlmem"},
        "search_providers": {"brave": {}},  # honoured (tests/reach/test_search_providers.py)
    })  # (mcp_servers and volumes are treadle keys too now: tests/mcp, tests/workspace)
    data["agents"]["doc/summarizer"] = {**data["agents"]["doc/summarizer"], "sql_scopes": ["user"],
                                        "compaction": {"enabled": True, "memory_flush": True}}
    data["interruption"] = {**data["interruption"], "backend": "cli", "heartbeat_interval_ms": 5000}
    with pytest.raises(ConfigError) as info:
        parse_config(data, "loomcycle.yaml")
    lines = str(info.value).splitlines()[1:]
    keys = [line.strip().split(": ")[1] for line in lines]
    # (sql_scopes is a treadle key now: tests/knowledge; compaction too, but not its memory_flush)
    assert sorted(keys) == sorted(["storage.sqlmem_root", "interruption.backend",
                                   "interruption.heartbeat_interval_ms", "agents.doc/summarizer.compaction"]), lines
    assert all("treadle" in line for line in lines)


def test_agent_names_take_loomcycles_category_form_but_stay_checked() -> None:
    assert "a/b/c" in parse_config({"agents": {"a/b/c": {}}}).agents
    for bad in ("/lead", "trail/", "a//b", "sp ace/x"):
        with pytest.raises(ConfigError, match="agent name"):
            parse_config({"agents": {bad: {}}})


def test_treadle_hash_prints_loomcycles_hash_for_a_loomcycle_yaml(tmp_path: Path) -> None:
    # loomcycle's pinned vector (internal/agents/sign_test.go TestSign_KnownVector)
    path = tmp_path / "loomcycle.yaml"
    path.write_text(yaml.safe_dump({"agents": {"researcher": {
        "system_prompt": "be thorough", "tools": ["WebFetch", "Read"], "max_tokens": 8192}}}))
    out = subprocess.run([sys.executable, "-m", "treadle.cli.main", "--config", str(path), "hash", "agent",
                          "researcher"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "sha256:e03953f0f2b43b6e9521b0c5e3f31cdddad6c3d3e907deb8172cd4c959de105e"


def test_a_user_tier_that_leaves_an_agent_nothing_is_a_config_error() -> None:
    data = {"tiers": {"t": [{"provider": "mock", "model": "echo"}]},
            "user_tiers": {"default": {}, "cloud-only": {"provider_priority": ["anthropic"]}},
            "agents": {"a": {"tier": "t"}}}
    with pytest.raises(ConfigError) as info:  # at start (the catalogue), `treadle check` and `cdk synth`
        resolve_agents(parse_config(data), default_registry(), build_providers(parse_config(data)))
    assert "agents.a.tier: no candidate of tier 't' is allowed by user tier 'cloud-only'" in str(info.value)


BASE_LAYER = """
models:
  small: {provider: mock, model: echo}
  big: {provider: mock, model: tool-caller}
provider_priority: [mock]
tiers:
  low: [small]
  middle: [small, big]
agents:
  shared: {tier: low, max_iterations: 4, tools: [Memory]}
"""

BUNDLE_LAYER = """
tiers:
  middle: !prepend [big]
agents:
  shared: {max_iterations: 9, tools: !append [Context]}
  team/assistant: {tier: middle, skills: [team/*]}
"""


def test_config_layers_merge_as_loomcycles(tmp_path: Path) -> None:
    base, bundle = tmp_path / "base.yaml", tmp_path / "bundle.yaml"
    base.write_text(BASE_LAYER)
    bundle.write_text(BUNDLE_LAYER)
    (tmp_path / "alone.yaml").write_text("agents:\n  team/assistant: {tier: middle}\n")
    with pytest.raises(ConfigError, match=r"unknown tier 'middle' \(none defined\); a loomcycle bundle takes its "
                                          r"tiers from a base layer"):
        load_config(tmp_path / "alone.yaml")
    config = load_config(f"{base}:{bundle}")
    # mappings merge by key (a same-named agent field by field); tagged sequences compose
    assert config.agents["shared"].tier == "low" and config.agents["shared"].max_iterations == 9
    assert config.agents["shared"].tools == ["Memory", "Context"]
    assert [c for c in config.tiers["middle"].candidates] == ["big", "small", "big"]
    assert config.agents["team/assistant"].tier == "middle"
    # the CLI's repeated --config is the same stack; the later layer wins a scalar
    out = subprocess.run([sys.executable, "-m", "treadle.cli.main", "--config", str(base), "--config", str(bundle),
                          "hash", "agent", "team/assistant"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("sha256:"), out.stderr
    with pytest.raises(ConfigError, match=r"base\.yaml \+ .*bad\.yaml: agents\.shared\.tier: unknown tier 'nope'"):
        (tmp_path / "bad.yaml").write_text("agents:\n  shared: {tier: nope}\n")
        load_config(f"{base}:{bundle}:{tmp_path / 'bad.yaml'}")


def test_storage_maps_onto_treadles_database_and_sql_memory() -> None:
    base = {"agents": {"a": {"model": "echo"}}}
    cfg = parse_config({**base, "storage": {"backend": "sqlite", "sqlmem_enabled": True,
                                            "sqlmem_statement_timeout_ms": 5000, "sqlmem_max_rows": 50}})
    assert cfg.memory.sql is not None and (cfg.memory.sql.statement_timeout_ms, cfg.memory.sql.max_rows) == (5000, 50)
    assert parse_config({**base, "storage": {"backend": "postgres", "pg_automigrate": True}}).memory.sql is None
    with pytest.raises(ConfigError) as info:
        parse_config({**base, "storage": {"backend": "postgres", "pg_dsn": "postgres://x/y", "pg_max_open_conns": 80,
                                          "sqlmem_max_rows": 5, "pg_automigrate": False}}, "loomcycle.yaml")
    lines = str(info.value)
    for key, hint in (("storage.pg_dsn", "DATABASE_URL"), ("storage.pg_max_open_conns", "TREADLE_DB_POOL_SIZE"),
                      ("storage.sqlmem_max_rows", "sqlmem_enabled"), ("storage.pg_automigrate", "migrates")):
        assert key in lines and hint in lines, (key, lines)
