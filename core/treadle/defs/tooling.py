"""The tool side of the def lifecycle: a *Def tool's input schema, running its op through the
family the runtime hands it (`ctx.services.ops[label]`), and refusals as tool errors."""

from __future__ import annotations

from typing import Any

from treadle.defs.args import MAX_DESCRIPTION
from treadle.defs.gates import Gate
from treadle.errors import ToolError, TreadleError
from treadle.ports import OpService
from treadle.tools.base import ToolContext, ToolResult


def def_tool_schema(
    ops: tuple[str, ...], overlay_help: str, *, create_promotes: bool, fork_promotes: bool,
    **properties: dict[str, Any],
) -> dict[str, Any]:
    """A *Def tool's input schema: the lifecycle's op-input fields plus the kind's own."""
    return {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(ops)},
            "name": {"type": "string"},
            "def_id": {"type": "string"},
            "version": {"type": "integer", "minimum": 1},
            "overlay": {"type": "object", "description": overlay_help + "; null removes a field (fork)"},
            "description": {"type": "string", "maxLength": MAX_DESCRIPTION},
            "promote": {"type": "boolean", "description": "make it the version new runs get (create: default "
                        f"{str(create_promotes).lower()}, fork: default {str(fork_promotes).lower()})"},
            "include_lineage": {"type": "boolean"},
            "include_retired": {"type": "boolean", "description": "list: include retired versions"},
            "retired": {"type": "boolean", "description": "list: include retired versions (loomcycle's name)"},
            "content_sha256": {"type": "string", "description": "verify: the hash computed locally"},
            **properties,
        },
        "required": ["op"],
    }


def as_tool_error(label: str, exc: TreadleError) -> ToolError:
    """A refusal as the tool's error result, prefixed with the tool's name once."""
    if isinstance(exc, ToolError):
        return exc
    return ToolError(exc.message if exc.message.startswith(label) else f"{label}: {exc.message}")


async def run_op(ctx: ToolContext, family: OpService, gate: Gate, args: dict[str, Any]) -> ToolResult:
    """Dispatch a tool call under the caller's gate; a refusal becomes the tool's error result."""
    try:
        result = await family.dispatch(ctx.tenant_id, args, gate=gate, run_id=ctx.run_id)
    except TreadleError as exc:
        raise as_tool_error(family.label, exc) from None
    return ToolResult.json(result)
