"""Operator configuration: `treadle.yaml` (agents) plus `TREADLE_*` environment settings.

Invalid configuration fails at start with the file, the key path and what is wrong, e.g.
``treadle.yaml: agents.demo.max_iterations: Input should be greater than or equal to 1``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from treadle.errors import ConfigError

IDENT = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
MOCK_MODELS = ("echo", "tool-caller", "script")
DEFAULT_MAX_ITERATIONS = 16
MemoryScope = Literal["agent", "user", "tenant"]
DEFAULT_MEMORY_SCOPES: tuple[MemoryScope, ...] = ("agent", "user")


class ScriptTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str | None = None
    tool: str | None = None
    input: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_kind(self) -> ScriptTurn:
        if (self.text is None) == (self.tool is None):
            raise ValueError("a script turn is either {text: ...} or {tool: NAME, input: {...}}")
        return self


class MockSettings(BaseModel):
    """Knobs of the deterministic mock provider."""

    model_config = ConfigDict(extra="forbid")
    tool_calls: int = Field(default=3, ge=0)
    latency_ms: float = Field(default=0.0, ge=0)
    jitter_ms: float = Field(default=0.0, ge=0)
    error_rate: float = Field(default=0.0, ge=0, le=1)
    seed: int = 0
    script: list[ScriptTurn] | None = None

    @field_validator("script")
    @classmethod
    def _ends_with_text(cls, v: list[ScriptTurn] | None) -> list[ScriptTurn] | None:
        if v is not None and (not v or v[-1].text is None):
            raise ValueError("mock.script must end with a {text: ...} turn")
        return v


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider: str = "mock"
    model: str = "echo"
    description: str = ""
    system_prompt: str = ""
    tools: list[str] = Field(default_factory=list)
    max_iterations: int = Field(default=DEFAULT_MAX_ITERATIONS, ge=1, le=1 << 20)
    max_tokens: int = Field(default=4096, ge=1)
    memory_scopes: list[MemoryScope] = Field(default_factory=lambda: list(DEFAULT_MEMORY_SCOPES))
    mock: MockSettings = Field(default_factory=MockSettings)

    @model_validator(mode="after")
    def _provider_model(self) -> AgentConfig:
        if self.provider != "mock":
            raise ValueError(f"unknown provider {self.provider!r} (this build has: mock)")
        if self.model not in MOCK_MODELS:
            raise ValueError(f"unknown mock model {self.model!r} (one of {', '.join(MOCK_MODELS)})")
        if self.model == "script" and self.mock.script is None:
            raise ValueError("model 'script' needs mock.script")
        return self


class TreadleConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agents: dict[str, AgentConfig] = Field(default_factory=dict)

    @field_validator("agents")
    @classmethod
    def _agent_names(cls, v: dict[str, AgentConfig]) -> dict[str, AgentConfig]:
        for name in v:
            if not IDENT.match(name):
                raise ValueError(f"agent name {name!r} must match [A-Za-z0-9_-]{{1,128}}")
        return v


class Settings(BaseSettings):
    """Process settings from the environment (`TREADLE_*`, plus `DATABASE_URL`)."""

    model_config = SettingsConfigDict(env_prefix="TREADLE_", extra="ignore", populate_by_name=True)

    config: Path = Path("treadle.yaml")
    home: Path = Path(".treadle")
    database_url: str | None = Field(default=None, validation_alias="DATABASE_URL")
    listen: str = "127.0.0.1:8787"
    workers: int = Field(default=8, ge=0, le=256)
    auth_token: str | None = None
    lease_seconds: float = Field(default=30.0, gt=0)
    sweep_interval_seconds: float = Field(default=2.0, gt=0)
    requeue_after_seconds: float = Field(default=60.0, gt=0)
    max_request_bytes: int = Field(default=1 << 20, ge=1024)
    tool_parallelism: int = Field(default=8, ge=1)
    db_pool_size: int = Field(default=0, ge=0)  # 0 = workers + 4
    provider_retries: int = Field(default=4, ge=0, le=10)
    sse_keepalive_seconds: float = Field(default=15.0, gt=0)

    def listen_host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"TREADLE_LISTEN: expected HOST:PORT, got {self.listen!r}")
        return host.strip("[]"), int(port)


def _key_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc if p not in ("function-after", "function-before"))


def parse_config(data: object, source: str = "treadle.yaml") -> TreadleConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: top level must be a mapping, got {type(data).__name__}")
    try:
        return TreadleConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"{source}: {_key_path(e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("invalid configuration\n  " + "\n  ".join(lines)) from None


def load_config(path: Path | str) -> TreadleConfig:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: configuration file not found (run `treadle init` to write a starter)")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    return parse_config(data, str(p))


def load_settings(**overrides: Any) -> Settings:
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        lines = [f"TREADLE_{_key_path(e['loc']).upper()}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("invalid environment\n  " + "\n  ".join(lines)) from None


def default_database_hint() -> str:
    return os.environ.get("DATABASE_URL", "") or "embedded (pgserver under TREADLE_HOME/pg)"
