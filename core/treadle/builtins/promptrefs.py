"""What loomcycle's `{{tool:Context.…}}` placeholders render to (its api/http/toolinject.go), from
the same facts the Context tool reports (builtins/context.py, context_ops.py): the agent's held
tools with their side-effect class and first sentence, the per-tool ops and required fields, and
the deployment's features and limits. Deterministic — sorted, fixed text — so a prompt renders
byte-identically on every step (prompt caching). The pure half: specs/toolrefs.py."""

from __future__ import annotations

import os
from typing import Any

from treadle.builtins.context import _held_tools, _tool_entry
from treadle.builtins.context_ops import guide, side_effect_class
from treadle.specs import toolrefs
from treadle.tools.base import ToolContext

SUMMARY_MAX = 120  # loomcycle's toolSummaryMaxDesc
TOOLS_PREAMBLE = ("These are the tools you can call right now. Call one directly when a task needs it; do not ask "
                  "whether a tool exists, and do not say you lack a capability listed here.")
GUIDE_PREAMBLE = ("How to call your tools — the op to pass and the required arguments for each. Use this to pick "
                  "the right op and fields; the full schema for each tool is already available to you.")
CAPS_PREAMBLE = ("What this deployment supports right now — rely on the available features and do not attempt the "
                 "unavailable ones.")


async def render_prompt(system: str, ctx: ToolContext) -> str:
    """The agent's system prompt with its placeholders expanded (and inject_tool_guide's appended)."""
    if getattr(ctx.agent_config, "inject_tool_guide", False):
        system = toolrefs.with_guide_refs(system)
    if "{{" not in system:
        return system
    bodies = {ref: await _render(ref, ctx) for ref in toolrefs.references(system)}
    return toolrefs.expand(system, bodies)


async def _render(ref: toolrefs.Ref, ctx: ToolContext) -> str:
    op = ref[1]
    if op == "tools":
        lines = []
        for name in _held_tools(ctx):
            entry = _tool_entry(ctx, name)
            line = "- " + name + _klass(name)
            summary = first_sentence(str(entry.get("description") or ""), SUMMARY_MAX)
            lines.append(line + (" — " + summary if summary else ""))
        return TOOLS_PREAMBLE + "\n\n" + "\n".join(sorted(lines)) if lines else ""
    if op == "guide":
        lines = []
        for t in guide(ctx, _held_tools(ctx))["tools"]:
            line = "- " + t["name"] + _klass(t["name"]) + ":"
            if t.get("ops"):
                line += " ops " + "|".join(t["ops"])
            if t.get("required"):
                line += (";" if t.get("ops") else "") + " requires " + ", ".join(t["required"])
            lines.append(line)
        return GUIDE_PREAMBLE + "\n\n" + "\n".join(sorted(lines)) if lines else ""
    features, limits = await deployment(ctx)
    yes = sorted(k for k, v in features.items() if v)
    no = sorted(k for k, v in features.items() if not v)
    text = CAPS_PREAMBLE + (f"\nAvailable: {', '.join(yes)}" if yes else "") + \
        (f"\nNot available: {', '.join(no)}" if no else "")
    return text + "\nLimits: " + ", ".join(f"{k}={limits[k]}" for k in sorted(limits))


async def deployment(ctx: ToolContext) -> tuple[dict[str, bool], dict[str, Any]]:
    """The deployment's features (those /v1/config reports) and numeric limits."""
    from treadle.builtins.searchcircuit import enabled_providers

    cfg = ctx.services.config
    embedder = ctx.services.vector_memory.embedder
    features = {
        "vector_memory": embedder is not None and await ctx.memory.vectors_available(),
        "full_text_memory": True, "sql_memory": cfg.memory.sql is not None, "documents": True,
        "scheduler": True, "webhooks": True, "retention": cfg.raw_retention is not None,
        "code_js": cfg.code_agents.enabled, "a2a": bool(cfg.a2a_server_cards),
        "search": cfg.raw_search is not None or bool(enabled_providers(cfg, os.environ)),
    }
    limits = {"memory_max_value_bytes": ctx.memory.max_value_bytes,
              "memory_scope_quota_bytes": ctx.memory.max_scope_bytes}
    return features, limits


def _klass(name: str) -> str:
    klass = side_effect_class(name)
    return f" ({klass})" if klass and klass != "unknown" else ""


def first_sentence(desc: str, max_bytes: int) -> str:
    """loomcycle's firstSentence: the first line, cut at the first ". ", capped on a word boundary."""
    desc = desc.strip().split("\n", 1)[0].strip()
    if ". " in desc:
        desc = desc[:desc.index(". ") + 1]
    data = desc.encode()
    if len(data) <= max_bytes:
        return desc
    cut = data[:max_bytes].decode("utf-8", "ignore")
    space = cut.rfind(" ")
    if space > len(cut) // 2:
        cut = cut[:space]
    return cut.strip() + "…"
