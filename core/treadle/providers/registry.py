"""Vendor presets over the three wire drivers, and the provider instances a config asks for.

| driver         | wire              | default base_url                           | key variable       |
|----------------|-------------------|--------------------------------------------|--------------------|
| anthropic      | anthropic         | https://api.anthropic.com                  | ANTHROPIC_API_KEY  |
| openai         | openai_chat       | https://api.openai.com/v1                  | OPENAI_API_KEY     |
| deepseek       | openai_chat       | https://api.deepseek.com                   | DEEPSEEK_API_KEY   |
| ollama         | openai_chat       | http://127.0.0.1:11434 (key optional)      | OLLAMA_API_KEY     |
| ollama_cloud   | openai_chat       | https://ollama.com                         | OLLAMA_API_KEY     |
| gemini         | gemini            | https://generativelanguage.googleapis.com  | GEMINI_API_KEY     |
| mock           | (in process)      | —                                          | —                  |
| code-js        | (in process)      | code agents (`code_agents.enabled`)        | —                  |

`openai` also fits any OpenAI-compatible server (vLLM, LM Studio, llama.cpp): give its
`base_url` including the `/v1` prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from treadle.config import CODE_JS, ProviderConfig, TreadleConfig
from treadle.providers.base import Provider
from treadle.providers.mock import MockProvider

if TYPE_CHECKING:
    from treadle.providers.http import Endpoint

# The HTTP drivers (and httpx) are imported when a config asks for one: a mock-only process and
# every cold start that does not call a model skip ~80 ms of imports.


@dataclass(frozen=True, slots=True)
class Preset:
    wire: str
    base_url: str
    api_key_env: str | None
    key_required: bool
    first_byte_s: float = 120.0


PRESETS: dict[str, Preset] = {
    "anthropic": Preset("anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY", True),
    "openai": Preset("openai_chat", "https://api.openai.com/v1", "OPENAI_API_KEY", True),
    "deepseek": Preset("openai_chat", "https://api.deepseek.com", "DEEPSEEK_API_KEY", True),
    # a cold local model can take minutes to load before it sends a byte
    "ollama": Preset("openai_chat", "http://127.0.0.1:11434", "OLLAMA_API_KEY", False, first_byte_s=600.0),
    "ollama_cloud": Preset("openai_chat", "https://ollama.com", "OLLAMA_API_KEY", True, first_byte_s=300.0),
    "gemini": Preset("gemini", "https://generativelanguage.googleapis.com", "GEMINI_API_KEY", True),
    "mock": Preset("mock", "", None, False),
}


def endpoint_for(provider_id: str, cfg: ProviderConfig) -> Endpoint:
    from treadle.providers.http import Endpoint

    preset = PRESETS[cfg.driver]
    t = cfg.timeouts
    return Endpoint(
        provider_id=provider_id,
        driver=cfg.driver,
        base_url=cfg.base_url or preset.base_url,
        api_key_env=cfg.api_key_env or preset.api_key_env,
        key_required=preset.key_required,
        max_concurrent=cfg.max_concurrent,
        connect_s=t.connect,
        first_byte_s=t.first_byte or preset.first_byte_s,
        idle_s=t.idle,
        total_s=t.total,
        retries=cfg.retries,
        options=dict(cfg.options),
        credential=cfg.credential,
    )


def build_provider(provider_id: str, cfg: ProviderConfig) -> Provider:
    if cfg.driver == "mock":
        mock = MockProvider()
        mock.name = provider_id
        return mock
    ep = endpoint_for(provider_id, cfg)
    if cfg.driver == "anthropic":
        from treadle.providers.anthropic import AnthropicProvider

        return AnthropicProvider(ep)
    if cfg.driver == "gemini":
        from treadle.providers.gemini import GeminiProvider

        return GeminiProvider(ep)
    from treadle.providers.openai_chat import DEEPSEEK, OLLAMA, OPENAI, OpenAIChatProvider

    dialect = {"openai": OPENAI, "deepseek": DEEPSEEK}.get(cfg.driver, OLLAMA)
    return OpenAIChatProvider(ep, dialect)


def build_providers(config: TreadleConfig) -> dict[str, Provider]:
    """`mock` plus one instance per `providers:` entry (instances hold connection pools)."""
    out: dict[str, Provider] = {"mock": MockProvider()}
    if config.code_agents.enabled:
        out[CODE_JS] = code_js_provider(config)
    for pid, cfg in config.providers.items():
        out[pid] = build_provider(pid, cfg)
    return out


def code_js_provider(config: TreadleConfig) -> Provider:
    """The code agents' provider (providers/codejs.py); the JavaScript engine loads on first use."""
    from treadle.providers.codejs import CodeAgentSettings, CodeJsProvider

    c = config.code_agents
    return CodeJsProvider(CodeAgentSettings(
        enabled=c.enabled, root=c.root, run_timeout_seconds=c.run_timeout_seconds,
        step_timeout_seconds=c.step_timeout_seconds, memory_mb=c.memory_mb, deterministic=c.deterministic))


def key_report(config: TreadleConfig) -> list[tuple[str, str, str | None, bool, bool]]:
    """(provider id, driver, key variable, variable is set, key required) per configured provider."""
    import os

    rows: list[tuple[str, str, str | None, bool, bool]] = []
    for pid, cfg in config.providers.items():
        preset = PRESETS[cfg.driver]
        env = cfg.api_key_env or preset.api_key_env
        rows.append((pid, cfg.driver, env, bool(env and os.environ.get(env)), preset.key_required))
    return rows
