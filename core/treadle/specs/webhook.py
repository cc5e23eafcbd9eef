"""WebhookDef bodies (loomcycle's field names), validated with pydantic.

Secrets are never in a def: `auth.signing_secret_env` / `auth.bearer_token_env` name environment
variables read when a delivery arrives.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from treadle.domain.ids import is_identifier
from treadle.specs.fieldtypes import ENV_NAME
from treadle.specs.mapping import compile_path
from treadle.specs.schedule import CHANNEL_NAME, MAX_HOOKS, Hook

HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,128}$")
TARGET = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
DEFAULT_BODY_LIMIT = 1 << 20
MAX_BODY_LIMIT = 16 << 20
Format = Literal["github", "stripe", "linear", "generic"]

#: `auth.header` → signature format, when `auth.format` is not given
FORMAT_BY_HEADER: dict[str, Format] = {
    "x-hub-signature-256": "github",
    "stripe-signature": "stripe",
    "linear-signature": "linear",
}
DEFAULT_HMAC_HEADER = "X-Treadle-Signature"


class WebhookAuth(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    kind: Literal["hmac", "bearer"] = "hmac"
    algorithm: Literal["sha256", "hmac-sha256"] = "sha256"
    #: treadle addition: the signature format; default inferred from `header`
    format: Format | None = None
    header: str | None = None
    signing_secret_env: str | None = None
    delivery_id_header: str | None = None
    bearer_token_env: str | None = None

    @field_validator("signing_secret_env", "bearer_token_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and not ENV_NAME.match(v):
            raise ValueError("names an environment variable (the secret itself never goes in a def)")
        return v

    @field_validator("header", "delivery_id_header")
    @classmethod
    def _header(cls, v: str | None) -> str | None:
        if v is not None and not HEADER_NAME.match(v):
            raise ValueError("must be an HTTP header name")
        return v

    @model_validator(mode="after")
    def _secret(self) -> WebhookAuth:
        if self.kind == "hmac" and not self.signing_secret_env:
            raise ValueError("auth.kind hmac needs signing_secret_env")
        if self.kind == "bearer" and not self.bearer_token_env:
            raise ValueError("auth.kind bearer needs bearer_token_env")
        return self

    def signature_format(self) -> Format:
        if self.format is not None:
            return self.format
        return FORMAT_BY_HEADER.get((self.header or "").lower(), "generic")

    def signature_header(self) -> str:
        if self.header:
            return self.header
        return {"github": "X-Hub-Signature-256", "stripe": "Stripe-Signature", "linear": "Linear-Signature"}.get(
            self.signature_format(), DEFAULT_HMAC_HEADER
        )


class RateLimit(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    requests_per_minute: float = Field(default=60.0, gt=0, le=1_000_000)
    burst: int = Field(default=10, ge=1, le=100_000)


class MappingEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    path: str
    required: bool = True


class WebhookSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    enabled: bool = True
    delivery: Literal["spawn", "channel"] = "spawn"
    agent: str | None = None
    channel: str | None = Field(default=None, pattern=CHANNEL_NAME)
    user_id: str | None = None
    auth: WebhookAuth
    rate_limit: RateLimit = Field(default_factory=RateLimit)
    body_size_limit_bytes: int = Field(default=DEFAULT_BODY_LIMIT, ge=1, le=MAX_BODY_LIMIT)
    #: target → strict JSONPath (`$.a.b[0]`, `$['k']`); a string is required, {path, required} may be optional
    payload_mapping: dict[str, str | MappingEntry] = {}
    metadata: dict[str, Any] = {}
    on_complete: list[Hook] = Field(default=[], max_length=MAX_HOOKS)

    @field_validator("agent", "user_id")
    @classmethod
    def _ident(cls, v: str | None) -> str | None:
        if v is not None and not is_identifier(v):
            raise ValueError("must match [A-Za-z0-9_-]{1,128}")
        return v

    @field_validator("payload_mapping")
    @classmethod
    def _mapping(cls, v: dict[str, str | MappingEntry]) -> dict[str, str | MappingEntry]:
        if len(v) > 64:
            raise ValueError("at most 64 mapped fields")
        for target, entry in v.items():
            if not TARGET.match(target):
                raise ValueError(f"target {target!r} must match [A-Za-z0-9_.-]{{1,64}}")
            compile_path(entry if isinstance(entry, str) else entry.path, target)
        return v

    @model_validator(mode="after")
    def _delivery(self) -> WebhookSpec:
        if self.delivery == "spawn" and not self.agent:
            raise ValueError("delivery spawn needs agent")
        if self.delivery == "channel" and not self.channel:
            raise ValueError("delivery channel needs channel")
        if self.delivery == "channel" and self.on_complete:
            raise ValueError("on_complete hooks follow a spawned run; delivery channel starts none")
        return self

    def mapping_entries(self) -> list[tuple[str, str, bool]]:
        """(target, path, required), by target name (a stored def's JSON keeps no key order)."""
        return [
            (t, e, True) if isinstance(e, str) else (t, e.path, e.required)
            for t, e in sorted(self.payload_mapping.items())
        ]

    def body(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)
