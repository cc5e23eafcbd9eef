"""Tool-use hooks: register, list, delete."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from treadle.domain.ids import IDENTIFIER_PATTERN, is_identifier
from treadle.specs.fieldtypes import EnvVarName
from treadle.wire._base import Request, Response

TOOL_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}\*?$|^[A-Za-z0-9_-]{0,63}\*$")


class HookRequest(Request):
    """Body of POST /v1/hooks."""

    owner: str = Field(json_schema_extra={"pattern": IDENTIFIER_PATTERN})
    name: str = Field(json_schema_extra={"pattern": IDENTIFIER_PATTERN})
    phase: Literal["pre", "post"]
    agents: list[str] = Field(default=[], max_length=64,
                              json_schema_extra={"items": {"type": "string", "pattern": IDENTIFIER_PATTERN}})
    tools: list[str] = Field(default=[], max_length=64,
                             json_schema_extra={"items": {"type": "string", "pattern": TOOL_PATTERN.pattern}})
    callback_url: str = Field(max_length=2048, json_schema_extra={"pattern": "^https?://[^/?#]+"})
    #: closed (the default): a hook that cannot answer denies the call (pre) or withholds its result (post)
    fail_mode: Literal["open", "closed"] = "closed"
    timeout_ms: int = Field(default=5000, ge=1, le=30_000)
    #: the variable holding the signing secret (default TREADLE_HOOKS_SECRET); it must be set
    secret_env: EnvVarName | None = None
    #: or a tenant credential (CredentialDef) by name whose value signs the call, resolved per call
    #: for the calling run (its agent's, else its user's, else the tenant's); instead of secret_env
    secret_credential: str | None = Field(default=None, json_schema_extra={"pattern": "^[A-Za-z0-9_-]{1,64}$"})
    #: sent with every call; a value may reference a tenant credential, `Bearer ${credential.NAME}`
    #: (a header whose credential does not resolve is left out)
    headers: dict[str, str] = Field(default={}, max_length=16)

    @field_validator("owner", "name")
    @classmethod
    def _ident(cls, v: str) -> str:
        if not is_identifier(v):
            raise ValueError("must match [A-Za-z0-9_-]{1,128}")
        return v

    @field_validator("agents")
    @classmethod
    def _agents(cls, v: list[str]) -> list[str]:
        bad = [a for a in v if not is_identifier(a)]
        if bad:
            raise ValueError(f"not agent names: {bad}")
        return v

    @field_validator("tools")
    @classmethod
    def _tools(cls, v: list[str]) -> list[str]:
        bad = [t for t in v if not TOOL_PATTERN.match(t)]
        if bad:
            raise ValueError(f"not tool names or 'prefix*' patterns: {bad}")
        return v

    @field_validator("secret_credential")
    @classmethod
    def _credential(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", v):
            raise ValueError("must be a credential name, [A-Za-z0-9_-]{1,64}")
        return v

    @model_validator(mode="after")
    def _one_secret(self) -> HookRequest:
        if self.secret_env and self.secret_credential:
            raise ValueError("give secret_env or secret_credential, not both")
        return self

    @field_validator("callback_url")
    @classmethod
    def _url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http(s) URL with a host")
        return v


class Hook(Response):
    id: str
    owner: str = Field(json_schema_extra={"pattern": IDENTIFIER_PATTERN})
    name: str = Field(json_schema_extra={"pattern": IDENTIFIER_PATTERN})
    phase: str
    agents: list[str]
    tools: list[str]
    callback_url: str
    fail_mode: str
    timeout_ms: int
    secret_env: str | None = None
    secret_credential: str | None = None
    headers: dict[str, str] = {}
    created_at: str


class HookList(Response):
    hooks: list[Hook]
