"""The op-input front end every def family shares (loomcycle's `*Def` tools and their HTTP twins).

An op input is a JSON object `{"op": ..., "name", "def_id", "version", "overlay", "description",
"promote", ...}`. The four families — AgentDef and SkillDef (substrate/family.py), ScheduleDef and
WebhookDef (schedule/defops.py) — differ in their gates, their treadle.yaml base and their hooks;
what they share lives here: argument checks, op routing, finding a version, folding an overlay into
a body, the tools' input schema and error wrapping, and the HTTP body parser.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any

from treadle.domain.defs import DefRecord
from treadle.domain.ids import is_identifier
from treadle.errors import DefRefused, NotFound, ToolError, TreadleError
from treadle.ports import OpService
from treadle.store.defs import DefStore
from treadle.tools.base import ToolContext, ToolResult

STATIC_DESCRIPTION = "from treadle.yaml"
#: (tenant, args, gate, run_id) → the op's JSON answer
OpHandler = Callable[[str, dict[str, Any], Any, "str | None"], Awaitable[dict[str, Any]]]


def opt_str(args: dict[str, Any], key: str, *, max_len: int = 1024) -> str | None:
    v = args.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or len(v) > max_len:
        raise DefRefused(f"{key} must be a string (≤{max_len} characters)")
    return v


def opt_bool(args: dict[str, Any], key: str, default: bool) -> bool:
    v = args.get(key, default)
    if not isinstance(v, bool):
        raise DefRefused(f"{key} must be a boolean")
    return v


def merge_overlay(body: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """`body` with `overlay`'s fields set; a null in the overlay removes the field."""
    merged = dict(body)
    for k, v in overlay.items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = v
    return merged


class DefOps(ABC):
    """One def kind's op routing over the shared DefStore. Subclasses set `kind` and `label` and
    return their ops from `handlers()`."""

    kind = ""
    label = ""

    def __init__(self, defs: DefStore) -> None:
        self.defs = defs

    @abstractmethod
    def handlers(self) -> dict[str, OpHandler]:
        """op name → handler."""

    async def dispatch(
        self, tenant_id: str, args: Any, *, gate: Any = None, run_id: str | None = None
    ) -> dict[str, Any]:
        if not isinstance(args, dict):
            raise DefRefused(f"{self.label}: the input must be a JSON object")
        handlers = self.handlers()
        op = args.get("op")
        if op not in handlers:
            raise DefRefused(f"{self.label}: op must be one of {', '.join(handlers)}")
        return await handlers[op](tenant_id, args, gate, run_id)

    async def resolve(
        self, tenant: str, args: dict[str, Any], *, fallback: Callable[[str], DefRecord | None] | None = None
    ) -> DefRecord:
        """By def_id; or name + version; or name → its active version, else `fallback(name)` (a
        treadle.yaml definition), else the name's newest version. NotFound otherwise."""
        def_id = opt_str(args, "def_id", max_len=64)
        version = args.get("version")
        if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
            raise DefRefused("version must be a positive integer")
        record: DefRecord | None
        if def_id:
            record = await self.defs.get(tenant, self.kind, def_id=def_id)
            what = f"def {def_id!r}"
        else:
            name = self.name_arg(args)
            what = f"{name!r}" + (f" version {version}" if version else "")
            record = await self.defs.get(tenant, self.kind, name=name, version=version)
            if record is None and version is None:
                record = fallback(name) if fallback is not None else None
                if record is None:
                    versions = await self.defs.list(tenant, self.kind, name=name, include_retired=True, limit=1)
                    record = versions[0] if versions else None
        if record is None:
            raise NotFound(f"{self.label} {what} not found")
        return record

    def description_arg(self, args: dict[str, Any], parent: DefRecord | None, *, max_len: int) -> str:
        """The new version's description: the input's, else the parent's (unless yaml-born)."""
        description = opt_str(args, "description", max_len=max_len)
        if description is None:
            description = parent.description if parent is not None and parent.description != STATIC_DESCRIPTION else ""
        return description

    def name_arg(self, args: dict[str, Any]) -> str:
        name = args.get("name")
        if not isinstance(name, str) or not is_identifier(name):
            raise DefRefused(f"{self.label}: name is required and must match [A-Za-z0-9_-]{{1,128}}")
        return name

    def overlay_arg(self, args: dict[str, Any], *, required: bool) -> dict[str, Any]:
        overlay = args.get("overlay")
        if overlay is None and not required:
            return {}
        if not isinstance(overlay, dict):
            raise DefRefused(f"{self.label}: overlay (the def's fields, an object) is required")
        return dict(overlay)


# -- the tools' side -------------------------------------------------------------------------------


def op_schema(ops: tuple[str, ...], overlay_help: str, **properties: dict[str, Any]) -> dict[str, Any]:
    """A *Def tool's input schema: the shared op-input fields plus the family's own."""
    return {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(ops)},
            "name": {"type": "string"},
            "def_id": {"type": "string"},
            "version": {"type": "integer", "minimum": 1},
            "overlay": {"type": "object", "description": overlay_help},
            "description": {"type": "string"},
            "include_lineage": {"type": "boolean"},
            **properties,
        },
        "required": ["op"],
    }


def as_tool_error(label: str, exc: TreadleError) -> ToolError:
    """A refusal as the tool's error result, prefixed with the tool's name once."""
    if isinstance(exc, ToolError):
        return exc
    return ToolError(exc.message if exc.message.startswith(label) else f"{label}: {exc.message}")


async def run_op(ctx: ToolContext, family: OpService, gate: Any, args: dict[str, Any]) -> ToolResult:
    """Dispatch a tool call; a refusal becomes the tool's error result."""
    try:
        result = await family.dispatch(ctx.tenant_id, args, gate=gate, run_id=ctx.run_id)
    except TreadleError as exc:
        raise as_tool_error(family.label, exc) from None
    return ToolResult.json(result)
