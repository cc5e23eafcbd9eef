"""Op-input checks every def kind uses: typed reads of the op input's fields, overlay folding, and
body validation helpers for `normalize` hooks.

Every reader is strict: a field of the wrong type is refused with a DefRefused that names it,
never coerced (`"false"` is not a boolean) and never ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from treadle.errors import DefRefused
from treadle.ports import AgentDirectory
from treadle.specs.fieldtypes import validation_message

#: the description of a version recorded from treadle.yaml (a yaml base, or a synced trigger)
STATIC_DESCRIPTION = "from treadle.yaml"
#: the longest version description, for every kind
MAX_DESCRIPTION = 4096

M = TypeVar("M", bound=BaseModel)


def _prefix(what: str) -> str:
    return f"{what}: " if what else ""


def opt_str(args: Mapping[str, Any], key: str, *, max_len: int, what: str = "") -> str | None:
    """A string of at most `max_len` characters, or None when absent (or null)."""
    v = args.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or len(v) > max_len:
        raise DefRefused(f"{_prefix(what)}{key} must be a string (≤{max_len} characters)")
    return v


def opt_bool(args: Mapping[str, Any], key: str, default: bool, *, what: str = "") -> bool:
    """A JSON boolean, or `default` when absent (or null); anything else is refused."""
    v = args.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise DefRefused(f"{_prefix(what)}{key} must be a boolean (true or false), not {type(v).__name__} {v!r}")
    return v


def merge_overlay(body: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """`body` with `overlay`'s fields set; a null in the overlay removes the field."""
    merged = dict(body)
    for k, v in overlay.items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = v
    return merged


def parse_spec(label: str, model: type[M], body: Mapping[str, Any]) -> M:
    """`model` validated from `body`; DefRefused("invalid <label>: field: reason; ...") otherwise."""
    try:
        return model.model_validate(dict(body))
    except ValidationError as exc:
        raise DefRefused(f"invalid {label}: {validation_message(exc)}") from None


async def require_agent(agents: AgentDirectory, tenant: str, agent: str, label: str) -> None:
    """DefRefused unless `agent` is a treadle.yaml agent or one of the tenant's promoted AgentDefs
    (what a run started by the def would get)."""
    if await agents.current(tenant, agent) is not None:
        return
    known = ", ".join(agents.static_names()) or "none"
    raise DefRefused(f"invalid {label}: agent: unknown agent {agent!r} (configured: {known}; "
                     "or a promoted AgentDef)")
