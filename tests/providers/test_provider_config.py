"""`providers:`, `models:`, `tiers:` and how agents name them; bad references fail at start with
the key path; `treadle doctor` says, per provider, whether its key variable is set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from treadle.builtins.registry import default_registry
from treadle.cli.main import main
from treadle.config import parse_config
from treadle.engine.agents import resolve_agents
from treadle.engine.model_routes import check_routes
from treadle.errors import ConfigError
from treadle.providers.anthropic import AnthropicProvider
from treadle.providers.gemini import GeminiProvider
from treadle.providers.http import parse_retry_after
from treadle.providers.openai_chat import OpenAIChatProvider
from treadle.providers.registry import build_providers

PROVIDERS = {
    "claude": {"driver": "anthropic"},
    "gpt": {"driver": "openai", "base_url": "http://127.0.0.1:9/v1/", "api_key_env": "MY_OPENAI_KEY"},
    "ds": {"driver": "deepseek"},
    "local": {"driver": "ollama", "timeouts": {"first_byte": 30}},
    "cloud": {"driver": "ollama_cloud"},
    "g": {"driver": "gemini", "max_concurrent": 2},
}


def error_of(data: dict[str, Any]) -> str:
    """What a config gets at start: its reference errors (parse_config), else its route errors."""
    with pytest.raises(ConfigError) as info:
        check_routes(parse_config(data), "treadle.yaml")
    return str(info.value)


def test_agents_name_a_provider_an_alias_or_a_tier() -> None:
    cfg = parse_config({
        "providers": PROVIDERS,
        "models": {"smart": {"provider": "claude", "model": "claude-sonnet-4-5", "options": {"temperature": 0.2}}},
        "tiers": {
            "main": ["smart", {"provider": "g", "model": "gemini-2.5-pro"}, {"provider": "mock", "model": "echo"}],
            "pinned": {"candidates": ["smart"], "pin_after_success": True},
        },
        "agents": {
            "direct": {"provider": "gpt", "model": "gpt-4o-mini"},
            "alias": {"model": "smart"},
            "tiered": {"tier": "main"},
            "pinned": {"tier": "pinned"},
            "mock": {},
        },
    })  # fmt: skip
    providers = build_providers(cfg)
    agents = resolve_agents(cfg, default_registry(), providers)

    def route(name: str) -> list[tuple[str, str]]:
        return [(c.provider_id, c.model) for c in agents[name].candidates]

    assert route("direct") == [("gpt", "gpt-4o-mini")]
    assert route("alias") == [("claude", "claude-sonnet-4-5")]
    assert route("tiered") == [("claude", "claude-sonnet-4-5"), ("g", "gemini-2.5-pro"), ("mock", "echo")]
    assert route("mock") == [("mock", "echo")]
    assert agents["alias"].candidates[0].options == {"temperature": 0.2}
    assert agents["pinned"].route is not None and agents["pinned"].route.pin_after_success
    assert isinstance(providers["claude"], AnthropicProvider) and isinstance(providers["g"], GeminiProvider)
    gpt, ds, local, cloud = (providers[k] for k in ("gpt", "ds", "local", "cloud"))
    assert isinstance(gpt, OpenAIChatProvider) and gpt.endpoint.base_url == "http://127.0.0.1:9/v1"
    assert gpt.endpoint.api_key_env == "MY_OPENAI_KEY" and gpt.dialect.name == "openai"
    assert isinstance(ds, OpenAIChatProvider) and ds.dialect.name == "deepseek"
    assert ds.endpoint.base_url == "https://api.deepseek.com" and ds.endpoint.api_key_env == "DEEPSEEK_API_KEY"
    assert isinstance(local, OpenAIChatProvider) and local.endpoint.base_url == "http://127.0.0.1:11434"
    assert not local.endpoint.key_required and local.endpoint.first_byte_s == 30
    assert isinstance(cloud, OpenAIChatProvider) and cloud.endpoint.base_url == "https://ollama.com"
    assert cloud.endpoint.key_required and cloud.endpoint.first_byte_s == 300
    assert providers["g"].endpoint.max_concurrent == 2


@pytest.mark.parametrize(("data", "expected"), [
    ({"agents": {"a": {"provider": "nope", "model": "x"}}},
     "treadle.yaml: agents.a.provider: unknown provider 'nope' (configured: mock)"),
    ({"providers": {"p": {"driver": "openai"}}, "agents": {"a": {"tier": "fast"}}},
     "treadle.yaml: agents.a.tier: unknown tier 'fast' (none defined)"),
    ({"models": {"m": {"provider": "ghost", "model": "x"}}},
     "treadle.yaml: models.m.provider: unknown provider 'ghost'"),
    ({"tiers": {"t": ["missing"]}}, "treadle.yaml: tiers.t.candidates.0: unknown model alias 'missing'"),
    ({"tiers": {"t": [{"provider": "mock", "model": "gpt-4"}]}},
     "treadle.yaml: tiers.t.candidates.0.model: unknown mock model 'gpt-4'"),
    ({"models": {"m": {"provider": "mock", "model": "echo"}}, "agents": {"a": {"model": "mm"}}},
     "treadle.yaml: agents.a.model: 'mm' names no provider: declare a `providers:` entry (e.g. {driver: "
     "anthropic}) and name it in `provider:`, or use a `models:` alias (m)"),
    ({"providers": {"p": {"driver": "azure"}}}, "treadle.yaml: providers.p.driver: Input should be"),
    ({"providers": {"p": {"driver": "openai", "api_key_env": "sk-live-123"}}},
     "providers.p.api_key_env: Value error, api_key_env names an environment variable"),
    ({"providers": {"p": {"driver": "openai", "base_url": "api.openai.com"}}},
     "providers.p.base_url: Value error, base_url must be an http(s) URL"),
    ({"providers": {"p": {"driver": "openai", "timeouts": {"idle": 0}}}},
     "providers.p.timeouts.idle: Input should be greater than 0"),
    ({"tiers": {"t": []}}, "tiers.t.candidates: List should have at least 1 item"),
    ({"tiers": {"t": ["m"]}, "models": {"m": {"provider": "mock", "model": "echo"}},
      "agents": {"a": {"tier": "t", "model": "echo"}}}, "agents.a: Value error, tier: replaces provider/model"),
    ({"providers": {"mock": {"driver": "openai"}}}, "providers.mock.driver: the id 'mock' is the built-in"),
    ({"models": {"s": {"provider": "mock", "model": "script"}}, "agents": {"a": {"model": "s"}}},
     "agents.a.mock.script: model 'script' (from agents.a.model) needs mock.script"),
])  # fmt: skip
def test_bad_references_name_the_key_path(data: dict[str, Any], expected: str) -> None:
    assert expected in error_of(data)


def test_retry_after_forms() -> None:
    import httpx

    assert parse_retry_after(httpx.Headers({"retry-after": "2"})) == 2.0
    assert parse_retry_after(httpx.Headers({"retry-after-ms": "150", "retry-after": "9"})) == 0.15
    assert parse_retry_after(httpx.Headers({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0
    assert parse_retry_after(httpx.Headers({"retry-after": "soon"})) is None
    assert parse_retry_after(httpx.Headers({})) is None


def test_doctor_reports_each_provider_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db_url: str
) -> None:
    conf = tmp_path / "treadle.yaml"
    conf.write_text(
        "providers:\n"
        "  claude: {driver: anthropic, api_key_env: DOCTOR_TEST_ANTHROPIC}\n"
        "  gpt: {driver: openai, api_key_env: DOCTOR_TEST_OPENAI}\n"
        "  spare: {driver: gemini, api_key_env: DOCTOR_TEST_GEMINI}\n"
        "  local: {driver: ollama, api_key_env: DOCTOR_TEST_OLLAMA}\n"
        "agents:\n"
        "  a: {provider: claude, model: claude-sonnet-4-5}\n"
        "  b: {provider: gpt, model: gpt-4o-mini}\n"
    )
    secret = "sk-doctor-secret-value-123456"
    monkeypatch.setenv("DOCTOR_TEST_OPENAI", secret)
    for name in ("DOCTOR_TEST_ANTHROPIC", "DOCTOR_TEST_GEMINI", "DOCTOR_TEST_OLLAMA"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DATABASE_URL", db_url)
    code = main(["--config", str(conf), "doctor"])
    out = capsys.readouterr().out
    assert "FAIL provider claude (driver anthropic): DOCTOR_TEST_ANTHROPIC is not set" in out
    assert "PASS provider gpt (driver openai): DOCTOR_TEST_OPENAI is set" in out
    assert "WARN provider spare (driver gemini): DOCTOR_TEST_GEMINI is not set (no agent uses it)" in out
    assert "PASS provider local (driver ollama): no key needed" in out
    assert secret not in out and code == 1
