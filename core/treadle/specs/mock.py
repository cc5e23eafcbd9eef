"""The mock provider's settings (an agent's `mock:` block): its deterministic knobs and a script
of turns."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class ScriptTurn(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    text: str | None = None
    tool: str | None = None
    input: dict[str, Any] = {}

    @model_validator(mode="after")
    def _one_kind(self) -> ScriptTurn:
        if (self.text is None) == (self.tool is None):
            raise ValueError("a script turn is either {text: ...} or {tool: NAME, input: {...}}")
        return self


class MockSettings(BaseModel):
    """Knobs of the deterministic mock provider."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    tool_calls: int = Field(default=3, ge=0)
    latency_ms: float = Field(default=0.0, ge=0)
    jitter_ms: float = Field(default=0.0, ge=0)
    error_rate: float = Field(default=0.0, ge=0, le=1)
    seed: int = 0
    script: list[ScriptTurn] | None = None
    #: the window the mock reports (`max_context_tokens`; 0: none), and a summary call that fails
    context_window: int = Field(default=0, ge=0)
    summary_error: bool = False
    #: the input of tool-caller's and chat-tool's calls (default: a fixed input per tool)
    tool_input: dict[str, Any] | None = None

    @field_validator("script")
    @classmethod
    def _ends_with_text(cls, v: list[ScriptTurn] | None) -> list[ScriptTurn] | None:
        if v is not None and (not v or v[-1].text is None):
            raise ValueError("mock.script must end with a {text: ...} turn")
        return v
