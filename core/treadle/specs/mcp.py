"""`mcp_servers:` — MCP servers whose tools agents may call (treadle/mcp), and the tool names.

    mcp_servers:
      github:
        transport: http                 # http (Streamable HTTP; loomcycle also says streamable-http) | stdio
        url: https://mcp.example.com/mcp
        headers: {Authorization: "Bearer ${run.credentials.github}"}
        timeout_seconds: 30
      files:
        transport: stdio                # the sidecar only: a subprocess of the treadle process
        command: npx
        args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"]
        env: {LOG_LEVEL: warn}

An agent opts in to a server's tools by name: `mcp__<server>__<tool>` or `mcp__<server>__*`
(default-deny: nothing else of the server is offered). `${run.credentials.NAME}` in a header is
replaced by the run's `user_credentials[NAME]` when the request is sent (treadle/mcp/credentials.py).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PREFIX = "mcp__"
#: a server name: no "__" (it separates the parts of a tool name)
SERVER_NAME = re.compile(r"^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$")
#: `${run.credentials.NAME}` (loomcycle's form; NAME [A-Za-z0-9_-]{1,64})
CREDENTIAL_REF = re.compile(r"\$\{run\.credentials\.([A-Za-z0-9_-]{1,64})\}")
CREDENTIAL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def tool_name(server: str, tool: str) -> str:
    return f"{PREFIX}{server}__{tool}"


def is_mcp_tool_name(name: str) -> bool:
    """`mcp__<server>__<tool>` or `mcp__<server>__*` (what an agent's `tools:` may list)."""
    return split_tool_name(name) is not None


def split_tool_name(name: str) -> tuple[str, str] | None:
    """(server, tool or "*") of an MCP tool name; None if `name` is not one."""
    if not name.startswith(PREFIX):
        return None
    server, sep, tool = name[len(PREFIX):].partition("__")
    if not sep or not tool or not SERVER_NAME.match(server):
        return None
    return server, tool


class McpServerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    transport: Literal["http", "streamable-http", "stdio"] = "http"
    url: str | None = Field(default=None, max_length=2048)
    headers: dict[str, str] = Field(default={}, max_length=64)
    command: str | None = Field(default=None, max_length=1024)
    args: list[str] = Field(default=[], max_length=256)
    env: dict[str, str] = Field(default={}, max_length=128)
    timeout_seconds: float = Field(default=30.0, gt=0, le=900)
    description: str = Field(default="", max_length=4096)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+", v):
            raise ValueError("must be an http:// or https:// URL")
        return v

    @model_validator(mode="after")
    def _shape(self) -> McpServerSpec:
        if self.transport == "stdio":
            if not self.command:
                raise ValueError("transport stdio needs command")
            if self.url or self.headers:
                raise ValueError("transport stdio takes command/args/env, not url/headers")
        else:
            if not self.url:
                raise ValueError(f"transport {self.transport} needs url")
            if self.command or self.args or self.env:
                raise ValueError(f"transport {self.transport} takes url/headers, not command/args/env")
        for value in self.headers.values():
            for ref in re.findall(r"\$\{run\.credentials\.([^}]*)\}", value):
                if not CREDENTIAL_NAME.match(ref):
                    raise ValueError(f"headers: ${{run.credentials.{ref}}}: the name must match [A-Za-z0-9_-]{{1,64}}")
        return self

    @property
    def is_stdio(self) -> bool:
        return self.transport == "stdio"


def check_server_names(names: list[str]) -> None:
    for name in names:
        if not SERVER_NAME.match(name) or len(name) > 64:
            raise ValueError(f"mcp server name {name!r} must match [A-Za-z0-9_-]{{1,64}} without '__'")
