"""loomcycle's agent `effort` as its drivers send it (internal/providers/anthropic driver.go
anthropicEffortBudget, openai driver.go ReasoningEffort, gemini driver.go geminiEffortBudget)."""

from __future__ import annotations

from typing import Any

from treadle.config import parse_config
from treadle.domain.content import Message, TextBlock
from treadle.providers.base import ModelRequest
from treadle.providers.gemini import gemini_effort_budget
from treadle.runtime import default_providers

PROVIDERS = default_providers(parse_config({"agents": {
    "a": {"provider": "anthropic", "model": "claude-sonnet-4-6"},
    "o": {"provider": "openai", "model": "gpt-5.4"},
    "g": {"provider": "gemini", "model": "gemini-2.5-flash"},
}}))


def body(provider: str, model: str, max_tokens: int = 4096, **options: Any) -> dict[str, Any]:
    req = ModelRequest(model=model, system="", messages=[Message("user", [TextBlock("hi")])], tools=[],
                       max_tokens=max_tokens, options=options)
    built: dict[str, Any] = PROVIDERS[provider].build_body(req)  # type: ignore[attr-defined]
    return built


def test_anthropic_effort_is_a_thinking_budget_except_low_and_haiku() -> None:
    assert body("anthropic", "claude-sonnet-4-6", effort="high")["thinking"] == {"type": "enabled",
                                                                                "budget_tokens": 8192}
    assert body("anthropic", "claude-sonnet-4-6", effort="medium")["thinking"]["budget_tokens"] == 2048
    assert "thinking" not in body("anthropic", "claude-sonnet-4-6", effort="low")
    assert "thinking" not in body("anthropic", "claude-haiku-4-5", effort="high")


def test_openai_effort_is_reasoning_effort() -> None:
    assert body("openai", "gpt-5.4", effort="medium")["reasoning_effort"] == "medium"
    assert "reasoning_effort" not in body("openai", "gpt-5.4")


def test_gemini_effort_is_a_thinking_budget_under_max_tokens() -> None:
    cfg = body("gemini", "gemini-2.5-flash", max_tokens=16384, effort="high")["generationConfig"]
    assert cfg["thinkingConfig"] == {"thinkingBudget": 8192}
    capped = body("gemini", "gemini-2.5-flash", effort="high")["generationConfig"]  # max_tokens 4096
    assert capped["thinkingConfig"] == {"thinkingBudget": 3072}
    assert [gemini_effort_budget(e, m) for e, m in (("low", 4096), ("medium", 2048), ("medium", 100),
                                                    ("high", 8192), ("high", 1500))] == [0, 1792, 0, 7168, 0]


def test_effort_in_yaml_is_honoured_not_refused() -> None:
    cfg = parse_config({"agents": {"r": {"provider": "anthropic", "model": "claude-opus-4-7", "effort": "high"}}})
    assert cfg.agents["r"].effort == "high"
