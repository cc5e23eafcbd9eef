"""Argument checks shared by the built-in tools (their errors name the tool)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from treadle.errors import ToolError


def refuse_unknown(args: Mapping[str, Any], schema: Mapping[str, Any], tool: str) -> None:
    """ToolError (code unknown_field) naming every argument that is not a property of the tool's
    input schema: a field is honoured or refused, never accepted and ignored."""
    known = schema.get("properties") or {}
    unknown = sorted(k for k in args if k not in known)
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise ToolError(
            f"{tool}: unknown field{'s' if len(unknown) > 1 else ''} {names} (accepted: {', '.join(sorted(known))})",
            code="unknown_field",
        )


def refuse_fields(args: Mapping[str, Any], fields: tuple[str, ...], tool: str, op: str, applies_to: str) -> None:
    """ToolError naming the first of `fields` given (not null) to an op they do not apply to."""
    for name in fields:
        if args.get(name) is not None:
            raise ToolError(f"{tool}.{op}: {name} applies to {applies_to} only", code="field_not_applicable")


def optional_ttl(args: Mapping[str, Any], tool: str, key: str = "ttl_seconds") -> float | None:
    """A positive number of seconds, or None when absent."""
    ttl = args.get(key)
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0:
        raise ToolError(f"{tool}: {key} must be a positive number")
    return float(ttl)


def ttl_arg(args: Mapping[str, Any], tool: str) -> tuple[float | None, bool]:
    """The time to live from `ttl_seconds` (treadle's spelling: a positive number of seconds) or
    `ttl` (loomcycle's: seconds, where 0 means "no expiry"). Returns (seconds or None, whether
    `ttl: 0` was given — the tool says what that keeps). Both given with different values is
    refused."""
    seconds = optional_ttl(args, tool)
    ttl = args.get("ttl")
    if ttl is None:
        return seconds, False
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl < 0:
        raise ToolError(f"{tool}: ttl must be a number of seconds ≥ 0 (0 = no expiry)")
    if seconds is not None and float(ttl) != seconds:
        raise ToolError(
            f"{tool}: ttl ({ttl:g}) and ttl_seconds ({seconds:g}) are two spellings of one field and disagree;"
            " give one of them"
        )
    return (float(ttl), False) if ttl > 0 else (None, True)
