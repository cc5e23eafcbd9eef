"""Operator configuration: every invalid config names the file, the key path and what is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from treadle.config import (
    DEFAULT_MAX_ITERATIONS,
    AgentConfig,
    MockSettings,
    Settings,
    load_config,
    load_settings,
    parse_config,
)
from treadle.engine.model_routes import agent_refs
from treadle.errors import ConfigError


def config_error(data: Any, source: str = "treadle.yaml") -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, source)
    return str(info.value)


def test_valid_config_and_defaults() -> None:
    cfg = parse_config({"agents": {"demo": {"model": "tool-caller", "tools": ["Memory"]}, "e": {}}})
    assert set(cfg.agents) == {"demo", "e"}
    demo = cfg.agents["demo"]
    assert (demo.provider, demo.model, demo.tools) == ("mock", "tool-caller", ["Memory"])
    assert demo.max_iterations == DEFAULT_MAX_ITERATIONS
    assert demo.memory_scopes == ["agent", "user"]
    assert cfg.agents["e"].model == "echo" and cfg.agents["e"].tools == []


def test_empty_or_missing_config_has_no_agents() -> None:
    assert parse_config(None).agents == {}
    assert parse_config({}).agents == {}


def test_bad_max_iterations_names_file_key_and_problem() -> None:
    msg = config_error({"agents": {"demo": {"max_iterations": 0}}}, "conf/treadle.yaml")
    assert "conf/treadle.yaml: agents.demo.max_iterations: Input should be greater than or equal to 1" in msg


def test_non_integer_max_iterations() -> None:
    msg = config_error({"agents": {"demo": {"max_iterations": "many"}}})
    assert "treadle.yaml: agents.demo.max_iterations:" in msg
    assert "integer" in msg


def test_unknown_provider() -> None:
    msg = config_error({"agents": {"demo": {"provider": "openia", "model": "gpt"}}})
    assert "treadle.yaml: agents.demo.provider: unknown provider 'openia'" in msg
    # loomcycle's provider ids need no declaration (tests/loomcycle/test_config_yaml.py)
    builtin = parse_config({"agents": {"demo": {"provider": "openai", "model": "gpt"}}})
    assert builtin.providers["openai"].driver == "openai"


def test_unknown_mock_model() -> None:
    msg = config_error({"agents": {"demo": {"provider": "mock", "model": "gpt-9"}}})
    assert "treadle.yaml: agents.demo.model: unknown mock model 'gpt-9'" in msg
    msg = config_error({"agents": {"demo": {"model": "gpt-9"}}})  # no provider: never read as the mock's
    assert "treadle.yaml: agents.demo.model: 'gpt-9' names no provider" in msg


def test_unknown_tier_and_tier_with_model() -> None:
    assert "treadle.yaml: agents.demo.tier: unknown tier 'fast'" in config_error(
        {"agents": {"demo": {"tier": "fast"}}}
    )
    msg = config_error({"tiers": {"fast": ["echo"]}, "agents": {"demo": {"tier": "fast", "model": "echo"}}})
    assert "treadle.yaml: agents.demo" in msg and "tier" in msg


def test_script_model_without_script() -> None:
    msg = config_error({"agents": {"s": {"model": "script"}}})
    assert "treadle.yaml: agents.s" in msg and "needs mock.script" in msg


def test_script_must_end_with_text() -> None:
    msg = config_error({"agents": {"s": {"model": "script", "mock": {"script": [{"tool": "Memory"}]}}}})
    assert "treadle.yaml: agents.s.mock.script: " in msg and "must end with a {text: ...} turn" in msg


def test_script_turn_is_text_or_tool_not_both() -> None:
    script = [{"text": "a", "tool": "Memory"}, {"text": "done"}]
    msg = config_error({"agents": {"s": {"model": "script", "mock": {"script": script}}}})
    assert "treadle.yaml: agents.s.mock.script.0: " in msg and "either {text: ...} or {tool:" in msg


def test_extra_keys_are_refused_at_every_level() -> None:
    assert "treadle.yaml: agents.demo.modle: Extra inputs are not permitted" in config_error(
        {"agents": {"demo": {"modle": "echo"}}}
    )
    assert "treadle.yaml: servers: Extra inputs are not permitted" in config_error({"agents": {}, "servers": {}})
    assert "treadle.yaml: agents.demo.mock.latency: Extra inputs are not permitted" in config_error(
        {"agents": {"demo": {"mock": {"latency": 5}}}}
    )


def test_several_errors_are_all_reported() -> None:
    msg = config_error({"agents": {"a": {"max_iterations": 0}, "b": {"max_tokens": 0}}})
    assert "agents.a.max_iterations" in msg and "agents.b.max_tokens" in msg


def test_bad_agent_name() -> None:
    msg = config_error({"agents": {"bad name": {}}})
    assert "treadle.yaml: agents:" in msg and "'bad name'" in msg


def test_bad_memory_scope_and_error_rate() -> None:
    assert "agents.a.memory_scopes.0:" in config_error({"agents": {"a": {"memory_scopes": ["global"]}}})
    assert "agents.a.mock.error_rate: Input should be less than or equal to 1" in config_error(
        {"agents": {"a": {"mock": {"error_rate": 1.5}}}}
    )


def test_top_level_must_be_a_mapping() -> None:
    msg = config_error(["agents"], "x.yaml")
    assert msg.startswith("x.yaml: top level must be a mapping")


def test_load_config_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "my.yaml"
    p.write_text("agents:\n  demo:\n    max_iterations: -3\n")
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert f"{p}: agents.demo.max_iterations: Input should be greater than or equal to 1" in str(info.value)


def test_load_config_valid_file(tmp_path: Path) -> None:
    p = tmp_path / "treadle.yaml"
    p.write_text("agents:\n  demo:\n    model: tool-caller\n    tools: [Memory, Context]\n")
    cfg = load_config(p)
    assert cfg.agents["demo"].tools == ["Memory", "Context"]


def test_load_config_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="configuration file not found"):
        load_config(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_config(bad)


def test_load_settings_reports_env_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREADLE_WORKERS", "-1")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "TREADLE_WORKERS:" in str(info.value)


def test_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREADLE_WORKERS", "3")
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@h/db")
    s = load_settings()
    assert s.workers == 3 and s.database_url == "postgresql://u@h/db"


def test_listen_host_port() -> None:
    assert Settings(listen="127.0.0.1:8787").listen_host_port() == ("127.0.0.1", 8787)
    assert Settings(listen="[::1]:9000").listen_host_port() == ("::1", 9000)
    for bad in ("8787", "host:", "host:abc"):
        with pytest.raises(ConfigError, match="TREADLE_LISTEN"):
            Settings(listen=bad).listen_host_port()


def test_models_can_be_built_directly() -> None:
    assert AgentConfig().model == "echo"
    assert MockSettings().tool_calls == 3


def test_settings_read_the_environment_case_insensitively_and_keywords_win(monkeypatch: pytest.MonkeyPatch) -> None:
    from treadle.config import load_settings

    monkeypatch.setenv("treadle_workers", "3")
    monkeypatch.setenv("TREADLE_SYNC_MID_STEP_WRITES", "yes")
    monkeypatch.setenv("TREADLE_CHAIN_BUDGET_SECONDS", "0.25")
    monkeypatch.setenv("DATABASE_URL", "postgresql://db.example/x")
    monkeypatch.setenv("TREADLE_NOT_A_SETTING", "ignored")
    s = load_settings(listen="0.0.0.0:9000")
    assert (s.workers, s.sync_mid_step_writes, s.chain_budget_seconds) == (3, True, 0.25)
    assert s.database_url == "postgresql://db.example/x" and s.listen == "0.0.0.0:9000"
    assert load_settings(workers=5).workers == 5  # a keyword beats the environment
    monkeypatch.setenv("TREADLE_WORKERS", "many")
    with pytest.raises(ConfigError, match="TREADLE_WORKERS"):
        load_settings()


def test_env_settings_from_an_explicit_mapping() -> None:
    from treadle.triggers.settings import TriggerSettings

    s = TriggerSettings.from_env({"TREADLE_SCHEDULER_ENABLED": "0", "TREADLE_SCHEDULER_BATCH": "50"})
    assert isinstance(s, TriggerSettings) and s.scheduler_enabled is False and s.scheduler_batch == 50
    with pytest.raises(ValidationError):
        TriggerSettings.from_env({"TREADLE_SCHEDULER_BATCH": "0"})  # ge=1


def test_a_json_config_file_is_read_as_json(tmp_path: Path) -> None:
    p = tmp_path / "treadle.json"
    p.write_text('{"agents": {"a": {"provider": "mock", "model": "echo"}}}')
    assert list(load_config(p).agents) == ["a"]
    p.write_text("agents:\n  a: {}\n")  # YAML is not JSON
    with pytest.raises(ConfigError, match=r"treadle\.json: not valid JSON"):
        load_config(p)
    p.write_text('{"agents": {"a": {"max_iterations": 0}}}')
    with pytest.raises(ConfigError, match=r"agents\.a\.max_iterations"):
        load_config(p)


def test_interruption_bounds_are_checked() -> None:
    cfg = parse_config({"interruption": {"default_timeout_ms": 1000, "max_timeout_ms": 2000}})
    assert (cfg.interruption.default_timeout_ms, cfg.interruption.max_pending_per_run) == (1000, 10)
    with pytest.raises(ConfigError, match="default_timeout_ms must not exceed max_timeout_ms"):
        parse_config({"interruption": {"default_timeout_ms": 5000, "max_timeout_ms": 2000}})
    with pytest.raises(ConfigError, match=r"interruption\.max_pending_per_run"):
        parse_config({"interruption": {"max_pending_per_run": 0}})


@pytest.mark.parametrize(("data", "line"), [
    ({"agents": {"a": {"modle": "echo"}}}, "agents.a.modle: {} 'model'?)"),
    ({"agnets": {}}, "agnets: {} 'agents'?)"),
    ({"memory": {"embeder": {}}}, "memory.embeder: {} 'embedder'?)"),
    ({"agents": {"a": {"model": "echo", "mock": {"scrpt": []}}}}, "agents.a.mock.scrpt: {} 'script'?)"),
])
def test_a_misspelled_key_gets_a_suggestion(data: dict[str, Any], line: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    said = "Extra inputs are not permitted (not a treadle key: did you mean"
    assert "treadle.yaml: " + line.format(said) in str(info.value)


def test_a_key_like_no_other_gets_no_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"zzzz": 1})
    assert "zzzz: Extra inputs are not permitted" in str(info.value) and "did you mean" not in str(info.value)


def test_a_vendor_model_without_a_provider_never_means_the_mock() -> None:
    with pytest.raises(ConfigError, match="'claude-sonnet-4-5' names no provider: declare a `providers:` entry"):
        parse_config({"agents": {"a": {"model": "claude-sonnet-4-5"}}})
    two = {"claude": {"driver": "anthropic"}, "gpt": {"driver": "openai"}}
    with pytest.raises(ConfigError, match=r"names no provider: add `provider:` \(one of claude, gpt\)"):
        parse_config({"providers": two, "agents": {"a": {"model": "claude-sonnet-4-5"}}})
    one = parse_config({"providers": {"claude": {"driver": "anthropic"}},
                        "agents": {"a": {"model": "claude-sonnet-4-5"}, "e": {"model": "echo"}}})
    assert [ref.provider for _, ref in agent_refs(one, "a")] == ["claude"]  # the one configured
    assert [ref.provider for _, ref in agent_refs(one, "e")] == ["mock"]  # the mock's own model


# --- lazy sections (parse_config(..., lazy=True): the cloud functions) ---------------------------

BAD_SECTIONS: dict[str, Any] = {
    "agents": {"a": {}},
    "webhooks": {"gh": {"agent": "a", "auth": {"kind": "nope"}}},
    "http": {"timeout_seconds": -1},
    "volumes": {"work": {"mode": "rwx"}},
}


def test_a_full_load_reports_every_section_at_once() -> None:
    msg = config_error({**BAD_SECTIONS, "agents": {"a": {"max_iterations": 0}}})
    for path in ("agents.a.max_iterations", "webhooks.gh.", "http.timeout_seconds", "volumes.work.mode"):
        assert f"treadle.yaml: {path}" in msg, (path, msg)


def test_a_lazy_load_validates_a_section_on_its_first_read_with_the_same_error() -> None:
    full = config_error(BAD_SECTIONS)
    cfg = parse_config(BAD_SECTIONS, "treadle.json", lazy=True)  # the sections it never reads stay unread
    assert set(cfg.agents) == {"a"}
    with pytest.raises(ConfigError) as info:
        _ = cfg.http
    line = next(ln.strip() for ln in full.splitlines() if "http.timeout_seconds" in ln)
    assert str(info.value).endswith(line.replace("treadle.yaml", "treadle.json"))
    with pytest.raises(ConfigError, match=r"treadle\.json: volumes\.work\.mode"):
        _ = cfg.volumes
    # a valid lazy section reads as a full load gives it; an absent one as its default
    good = {"agents": {"a": {}}, "volumes": {"work": {"default": True}}, "scheduled_runs": {
        "tick": {"agent": "a", "schedule": "@hourly", "prompt": "hi"}}}
    lazy, eager = parse_config(good, lazy=True), parse_config(good)
    assert lazy.volumes == eager.volumes and lazy.volumes["work"].default
    assert lazy.scheduled_runs == eager.scheduled_runs and set(lazy.scheduled_runs) == {"tick"}
    assert lazy.webhooks == {} and lazy.http.max_redirects == eager.http.max_redirects and lazy.search is None


def test_a_lazy_load_still_refuses_the_sections_every_process_reads() -> None:
    with pytest.raises(ConfigError, match=r"agents\.a\.max_iterations"):
        parse_config({"agents": {"a": {"max_iterations": 0}}}, lazy=True)
    with pytest.raises(ConfigError, match=r"agents\.a\.tier: unknown tier"):
        parse_config({"agents": {"a": {"tier": "t"}}}, lazy=True)


def test_a_misspelled_key_in_a_lazy_section_gets_the_closest_key() -> None:
    msg = config_error({"agents": {"a": {}}, "http": {"timeout_secs": 3}})
    said = "Extra inputs are not permitted (not a treadle key: did you mean 'timeout_seconds'?)"
    assert f"http.timeout_secs: {said}" in msg
    msg = config_error({"agents": {"a": {}}, "scheduled_runs": {"t": {"agnet": "a", "schedule": "@hourly",
                                                                      "prompt": "x"}}})
    assert "scheduled_runs.t.agnet" in msg and "did you mean 'agent'" in msg


def test_a_lazy_load_imports_no_trigger_spec_until_a_trigger_section_is_read(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    path = tmp_path / "treadle.json"
    path.write_text(json.dumps({"agents": {"a": {}}, "webhooks": {"gh": {
        "agent": "a", "auth": {"kind": "bearer", "bearer_token_env": "GH_TOKEN"}}}}))
    code = ("import sys\nfrom treadle.config import load_config\n"
            f"cfg = load_config({str(path)!r}, lazy=True)\n"
            "before = 'treadle.specs.webhook' in sys.modules\n"
            "print(before, sorted(cfg.webhooks), 'treadle.specs.webhook' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "['gh']", "True"]
