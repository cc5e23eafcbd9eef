"""ScheduleDef bodies and on_complete hooks (loomcycle's field names), validated with pydantic.

Used by the `scheduled_runs:` yaml section, the ScheduleDef tool and POST /v1/_scheduledef alike.
A body is stored normalized (`ScheduleSpec.body()`), so the content hash is stable.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from treadle.domain.ids import is_identifier
from treadle.domain.segments import Segment
from treadle.specs.cron import Cron, CronError, normalize_cron, zone
from treadle.specs.fieldtypes import DefScope as DefScope  # re-exported: the specs' users import it here
from treadle.specs.fieldtypes import validation_message as validation_message

CHANNEL_NAME = r"^[A-Za-z0-9_.:/-]{1,128}$"
MAX_HOOKS = 16


class MemorySetHook(BaseModel):
    """After a completed run: Memory[scope][key] = payload (or, without a payload, the run's
    outcome `{run_id, status, final_text, ...}`)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    kind: Literal["memory.set"]
    scope: Literal["agent", "user", "tenant"]
    key: str = Field(min_length=1, max_length=512)
    payload: Any = None
    ttl_seconds: float | None = Field(default=None, gt=0)


class ChannelPublishHook(BaseModel):
    """After a completed run: publish `{schedule_name|webhook_name, run_id, status, final_text,
    payload}` to `channel` (waking runs parked on it)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    kind: Literal["channel.publish"]
    channel: str = Field(pattern=CHANNEL_NAME)
    payload: Any = None


class McpCallHook(BaseModel):
    """After a completed run: call `tool` of the MCP server `server` (treadle.yaml's mcp_servers or
    an MCPServerDef) with `args` (loomcycle's fields)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    kind: Literal["mcp.call"]
    server: str = Field(pattern=r"^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$", max_length=64)
    tool: str = Field(min_length=1, max_length=128)
    args: dict[str, Any] = {}


Hook = Annotated[MemorySetHook | ChannelPublishHook | McpCallHook, Field(discriminator="kind")]


def _ident(v: str | None, what: str) -> str | None:
    if v is not None and not is_identifier(v):
        raise ValueError(f"{what} must match [A-Za-z0-9_-]{{1,128}}")
    return v


class ScheduleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    agent: str
    schedule: str
    timezone: str = "UTC"
    prompt: list[Segment] | str
    user_id: str | None = None
    metadata: dict[str, Any] = {}
    #: 0 = unbounded; N = the schedule retires itself after its Nth fire
    max_fires: int = Field(default=0, ge=0)
    enabled: bool = True
    #: missed fires (older than the grace window) run after downtime: the newest N; 0 = skip them all
    catch_up_max: int = Field(default=1, ge=0, le=1000)
    on_complete: list[Hook] = Field(default=[], max_length=MAX_HOOKS)

    @field_validator("agent")
    @classmethod
    def _agent(cls, v: str) -> str:
        # an identifier, or loomcycle's `category/name` (identifiers joined by `/`)
        if len(v) > 128 or not all(is_identifier(part) for part in v.split("/")):
            raise ValueError("agent must match [A-Za-z0-9_-]{1,128}, or category/name of such parts")
        return v

    @field_validator("user_id")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        return _ident(v, "user_id")

    @field_validator("metadata")
    @classmethod
    def _fanout(cls, v: dict[str, Any]) -> dict[str, Any]:
        """loomcycle's consolidation fan-out markers (triggers/fanout.py), checked as it reads them."""
        fan, scope = v.get("memory_consolidation_fanout"), v.get("memory_consolidation_scope")
        if fan is not None and not isinstance(fan, bool):
            raise ValueError("metadata.memory_consolidation_fanout must be a boolean")
        if scope is not None and (fan is not True or scope != "user"):
            raise ValueError("metadata.memory_consolidation_scope: a consolidation fan-out targets users "
                             "(memory_consolidation_scope: user, with memory_consolidation_fanout: true)")
        return v

    @field_validator("schedule")
    @classmethod
    def _cron(cls, v: str) -> str:
        try:
            return normalize_cron(v)
        except CronError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        try:
            zone(v)
        except CronError as exc:
            raise ValueError(str(exc)) from None
        return v

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, v: list[Segment] | str) -> list[Segment] | str:
        if isinstance(v, str) and not v.strip():
            raise ValueError("prompt must not be empty")
        if isinstance(v, list) and not v:
            raise ValueError("prompt needs at least one segment")
        return v

    @property
    def cron(self) -> Cron:
        return Cron(self.schedule, self.timezone)

    def segments(self) -> list[dict[str, Any]]:
        """The run input: operator-authored, so a plain-string prompt is trusted text."""
        if isinstance(self.prompt, str):
            return [{"role": "user", "content": [{"type": "trusted-text", "text": self.prompt}]}]
        return [s.model_dump(exclude_none=True) for s in self.prompt]

    def body(self) -> dict[str, Any]:
        """The normalized body stored in the def (and hashed)."""
        out = self.model_dump(mode="json", exclude_none=True)
        out["prompt"] = self.segments()
        return out


