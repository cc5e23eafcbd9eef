"""The meta-tool registry of treadle's MCP server: a tool is a name, a description, a pydantic
argument model (None: a *Def family's op input) and a handler; `tool` registers one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from treadle.runtime import Runtime
from treadle.security.principal import Principal

Handler = Callable[[Runtime, Principal, Any], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class MetaTool:
    name: str
    description: str
    args: type[BaseModel] | None  # None: the op input of a *Def family (its builtin tool's schema)
    handler: Handler


TOOLS: dict[str, MetaTool] = {}


def tool(name: str, description: str, args: type[BaseModel] | None) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        TOOLS[name] = MetaTool(name, description, args, fn)
        return fn

    return register


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")
