"""Which channels an agent's Channel calls may reach: loomcycle's per-agent allowlists (agent
`channels: {publish: [...], subscribe: [...]}`), matched as loomcycle matches them — an entry is
a channel name, or `prefix/*`, which matches every name under `prefix/` but not `prefix` itself;
a name with `..` or `//` never matches (a wildcard must not reach `team/../secret`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

Side = Literal["publish", "subscribe"]


def channel_allowed(name: str, allowlist: Sequence[str]) -> bool:
    name = name.strip()
    if ".." in name or "//" in name:
        return False
    for pat in allowlist:
        pat = pat.strip()
        if pat == name:
            return True
        if pat.endswith("/*"):
            prefix = pat[:-1]  # keeps the trailing "/"
            if name.startswith(prefix) and len(name) > len(prefix):
                return True
    return False


def refusal(side: Side, name: str, allowlist: Sequence[str]) -> str | None:
    """None when `name` is allowed on `side`, else loomcycle's wording of the refusal."""
    if channel_allowed(name, allowlist):
        return None
    if not allowlist:
        return f"Channel tool: this agent has no {side} allowlist — add `channels.{side}: [{name}]` to the agent yaml"
    return f"Channel tool: {side} not allowed on channel {name!r} (agent allowlist: {list(allowlist)})"


def acl_grants(acl: Mapping[str, Sequence[str]] | None) -> list[str] | None:
    """An allowlist as grant entries (`publish:<pattern>`, `subscribe:<pattern>`) for the defs'
    grant check (defs/gates.py): None without a block — no narrowing, wider than any list. A def
    written through a tool may carry only entries its author holds, literally."""
    if acl is None:
        return None
    return sorted(f"{side}:{pat}" for side in ("publish", "subscribe") for pat in acl.get(side) or ())
