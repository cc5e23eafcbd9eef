"""Argument checks shared by the built-in tools (their errors name the tool)."""

from __future__ import annotations

from typing import Any

from treadle.errors import ToolError


def optional_ttl(args: dict[str, Any], tool: str, key: str = "ttl_seconds") -> float | None:
    """A positive number of seconds, or None when absent."""
    ttl = args.get(key)
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0:
        raise ToolError(f"{tool}: {key} must be a positive number")
    return float(ttl)
