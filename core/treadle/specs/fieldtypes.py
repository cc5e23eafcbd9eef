"""Field types the configuration models share (providers:, memory.embedder:, agents' *_def_scopes)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, ValidationError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def _http_url(v: str) -> str:
    if not re.match(r"^https?://[^\s/]+", v):
        raise ValueError(f"base_url must be an http(s) URL, got {v!r}")
    return v.rstrip("/")


def _env_name(v: str) -> str:
    if not ENV_NAME.match(v):
        raise ValueError("api_key_env names an environment variable (not the key itself)")
    return v


#: an http(s) base URL, stored without its trailing slash
BaseUrl = Annotated[str, AfterValidator(_http_url)]
#: the name of an environment variable that holds a secret (never the secret itself)
EnvVarName = Annotated[str, AfterValidator(_env_name)]

#: an entry of an agent's `schedule_def_scopes` / `webhook_def_scopes` (and the other *_def_scopes)
DefScope = Annotated[str, Field(pattern=r"^(self|descendants|any|named:[A-Za-z0-9_-]{1,128})$")]


def validation_message(exc: ValidationError, prefix: str = "") -> str:
    """`field.path: message; ...` — short, for tool results and 422 bodies."""
    parts = []
    for e in exc.errors()[:5]:
        loc = ".".join(str(p) for p in e.get("loc", ()) if not str(p).startswith("function-"))
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{prefix}{loc}: {msg}" if loc else f"{prefix}{msg}")
    return "; ".join(parts)
