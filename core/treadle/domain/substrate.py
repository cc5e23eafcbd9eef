"""Substrate shapes without I/O: skills (yaml `skills:` and SkillDef bodies) and evaluation scopes."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_SKILL_BODY_CHARS = 64 * 1024

#: an entry of an agent's `evaluation_scopes` (empty = the Evaluation tool refuses everything):
#: submit_self (its own run), submit_descendants (runs it started, at any depth), submit_any
#: (any run of the tenant), read_any (read every evaluation of the tenant)
EvaluationScope = Literal["submit_self", "submit_descendants", "submit_any", "read_any"]


class SkillSpec(BaseModel):
    """A skill: text added to the system prompt of every agent that lists it in `skills:`.
    `tools` names the tools the skill expects the agent to have (informational; hashed)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    body: str = Field(min_length=1, max_length=MAX_SKILL_BODY_CHARS)
    description: str = Field(default="", max_length=4096)
    tools: list[str] = Field(default=[], max_length=128)

    @field_validator("body")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("body must not be blank")
        return v

    @field_validator("tools")
    @classmethod
    def _tool_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.match(r"^[A-Za-z0-9_.:-]{1,128}$", name):
                raise ValueError(f"tool name {name!r} is not valid")
        return v
