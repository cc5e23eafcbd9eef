"""Built-in `Evaluation` (default-deny): score runs and read the scores of defs
(substrate/evaluation.py). Gated by the calling agent's `evaluation_scopes`."""

from __future__ import annotations

from typing import Any

from treadle.defs.tooling import as_tool_error
from treadle.errors import TreadleError
from treadle.substrate.evaluation import OPS, EvalGate
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult


class EvaluationTool:
    name = "Evaluation"
    effects: ToolEffects = "transactional"  # every write goes through the step's transaction
    description = (
        "Score runs and read scores. op: submit (run_id, score, dimensions{name: number}, judgement, rationale) | "
        "get (eval_id) | list_for_run (run_id) | list_for_def (def_id or name, include_lineage) | aggregate "
        "(def_id or name, include_lineage) → count and mean per def version. Scores inform choices; they never "
        "promote anything by themselves. Limited by this agent's evaluation_scopes."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(OPS)},
            "run_id": {"type": "string"},
            "eval_id": {"type": "string"},
            "def_id": {"type": "string"},
            "name": {"type": "string", "description": "an agent name (list_for_def, aggregate)"},
            "score": {"type": "number"},
            "dimensions": {"type": "object", "additionalProperties": {"type": "number"}},
            "judgement": {"description": "submit: a free-form JSON value (≤ 32 KiB): a label, an object, …"},
            "rationale": {"type": "string"},
            "include_lineage": {"type": "boolean"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
        },
        "required": ["op"],
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        service = ctx.services.ops["Evaluation"]
        scopes = tuple(getattr(ctx.agent_config, "evaluation_scopes", ()) or ())
        gate = EvalGate(scopes, ctx.run_id, ctx.agent, ctx.def_id)
        try:
            return ToolResult.json(await service.dispatch(ctx.tenant_id, args, gate=gate))
        except TreadleError as exc:
            raise as_tool_error("Evaluation", exc) from None
