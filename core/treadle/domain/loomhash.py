"""loomcycle's content hashes for agent and skill definitions, byte for byte.

loomcycle (internal/agents/sign.go, internal/skills/sign.go) hashes `"sha256:" + hex(SHA-256(b))`
where `b` is Go's `encoding/json.Marshal` of a fixed struct: keys in declaration order (which is
alphabetical at the top level), `omitempty` (zero values and empty lists/maps left out), compact,
map keys sorted, `<` `>` `&` U+2028 U+2029 escaped, other non-ASCII written raw, floats in the
shortest form (`1` not `1.0`, `1e-7` not `1e-07`). The agent's `system_prompt` and the skill's
`body` have CRLF turned into LF and trailing spaces, tabs, CRs and LFs trimmed; `code_body` is
hashed as written. Name and description are part of the hash.

treadle's own earlier hash (no name or description, empty values dropped, Python's canonical
JSON) stays available as `treadle_sha256` (substrate/agentdefs.py, substrate/skilldefs.py).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

#: AgentContent's keys in declaration order (= JSON emit order = the hash input)
AGENT_KEYS = (
    "channels", "code_body", "compaction", "core_blocks", "description", "effort", "evaluation_scopes",
    "history_scope", "inherit_core_blocks", "inject_tool_guide", "internal", "interruption",
    "max_concurrent_children", "max_iterations", "max_tokens", "memory_backend", "memory_consolidation",
    "memory_index_max_bytes", "memory_inject_max_tokens", "memory_protocol", "memory_quota_bytes",
    "memory_roots", "memory_scopes", "model", "models", "name", "provider", "providers", "search_providers",
    "sampling", "sql_quota_bytes", "sql_scopes", "system_prompt", "tier", "tools", "unbounded_iterations",
)
#: nested structs: (key, omitempty) in declaration order
_CHANNELS = (("publish", True), ("subscribe", True))
_INTERRUPTION = (("enabled", True), ("kinds", True), ("max_pending", True))
_SAMPLING = (("temperature", True), ("top_p", True), ("top_k", True), ("frequency_penalty", True),
             ("presence_penalty", True), ("seed", True), ("stop", True))
_COMPACTION = (("enabled", True), ("target_percentage", True), ("keep_last_n", True), ("keep_first", True),
               ("autocompact_at_pct", True), ("model", True), ("memory_flush", True))
_CORE_BLOCK = (("label", False), ("scope", True), ("limit_bytes", True), ("read_only", True))
_TIER_CANDIDATE = (("provider", False), ("model", False))
SKILL_KEYS = ("body", "description", "name", "tools")

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f",
            "<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def go_string(s: str) -> str:
    out = ['"']
    for ch in s:
        esc = _ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        elif 0xD800 <= ord(ch) <= 0xDFFF:  # a lone surrogate is invalid UTF-8: Go writes U+FFFD
            out.append("\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_float(f: float) -> str:
    """Go's float64 encoding: shortest round-trip digits, `e` only below 1e-6 or from 1e21."""
    if not math.isfinite(f):
        raise ValueError(f"{f} cannot be encoded as JSON")
    if f == int(f) and abs(f) < 1e21:
        return str(int(f)) if f != 0 or math.copysign(1, f) > 0 else "-0"
    a = abs(f)
    if a < 1e-6 or a >= 1e21:
        mant, _, exp = repr(f).partition("e")
        sign = "-" if exp.startswith("-") else "+"
        return f"{mant}e{sign}{exp.lstrip('+-').lstrip('0') or '0'}"
    r = repr(f)
    # Python writes exponents below 1e-4 (and from 1e16, integral there): Go positional digits
    return format(Decimal(r), "f") if "e" in r else r


def go_json(value: Any) -> str:
    """`encoding/json.Marshal` of a value made of dicts (sorted keys), lists, str, int, float, bool."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_string(value)
    if isinstance(value, Mapping):
        items = sorted(value.items(), key=lambda kv: str(kv[0]).encode())
        return "{" + ",".join(f"{go_string(str(k))}:{go_json(v)}" for k, v in items) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    raise TypeError(f"cannot encode {type(value).__name__}")


def is_go_zero(v: Any) -> bool:
    """What Go's omitempty leaves out (see `_empty`)."""
    return _empty(v)


def _empty(v: Any) -> bool:
    """Go's omitempty: false, 0, "", nil, empty slice or map."""
    if v is None or v is False:
        return True
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v == 0
    if isinstance(v, (str, list, tuple, dict)):
        return len(v) == 0
    return False


def _struct(fields: Sequence[tuple[str, bool]], src: Mapping[str, Any], *, pointers: bool = False) -> str:
    """A struct in declaration order. `pointers`: the fields are Go pointers (nil omitted, a
    zero value kept) — sampling and compaction, where `temperature: 0` means something."""
    parts = []
    for key, omitempty in fields:
        v = src.get(key)
        if pointers and key != "stop":
            if v is None:
                continue
        elif omitempty and _empty(v):
            continue
        parts.append(f"{go_string(key)}:{go_json(v if v is not None else '')}")
    return "{" + ",".join(parts) + "}"


def normalize_text(s: str) -> str:
    """loomcycle's normalizeText: CRLF → LF, then trailing " \\t\\n\\r" trimmed."""
    return s.replace("\r\n", "\n").rstrip(" \t\n\r")


def _sign(encoded: str) -> str:
    return "sha256:" + hashlib.sha256(encoded.encode("utf-8", "surrogatepass")).hexdigest()


def agent_content_json(name: str, definition: Mapping[str, Any]) -> str:
    """The bytes loomcycle hashes for agent `name` with the given definition (yaml / overlay keys;
    keys outside AgentContent — skills, *_def_scopes, volumes, … — do not take part)."""
    d = dict(definition)
    d["name"] = name
    if "code" in d and "code_body" not in d:
        d["code_body"] = d["code"]
    d["system_prompt"] = normalize_text(str(d.get("system_prompt") or ""))
    parts = []
    for key in AGENT_KEYS:
        v = d.get(key)
        if key == "channels":
            if not isinstance(v, Mapping) or not (v.get("publish") or v.get("subscribe")):
                continue
            enc = _struct(_CHANNELS, v)
        elif key == "interruption":
            if not isinstance(v, Mapping) or not (v.get("enabled") or v.get("kinds") or v.get("max_pending")):
                continue
            enc = _struct(_INTERRUPTION, v)
        elif key in ("sampling", "compaction"):
            fields = _SAMPLING if key == "sampling" else _COMPACTION
            if not isinstance(v, Mapping):
                continue
            present = {k: v[k] for k, _ in fields if v.get(k) is not None and not (k == "stop" and not v[k])}
            if not present:
                continue
            enc = _struct(fields, present, pointers=True)
        elif key == "core_blocks":
            if not v:
                continue
            enc = "[" + ",".join(_struct(_CORE_BLOCK, b) for b in v) + "]"
        elif key == "models":
            if not v:
                continue
            enc = "{" + ",".join(
                f"{go_string(tier)}:[" + ",".join(_struct(_TIER_CANDIDATE, c) for c in cands) + "]"
                for tier, cands in sorted(v.items(), key=lambda kv: kv[0].encode())
            ) + "}"
        else:
            if _empty(v):
                continue
            enc = go_json(v)
        parts.append(f"{go_string(key)}:{enc}")
    return "{" + ",".join(parts) + "}"


def agent_sha256(name: str, definition: Mapping[str, Any]) -> str:
    """loomcycle's `content_sha256` of an agent (agents.Sign)."""
    return _sign(agent_content_json(name, definition))


def skill_content_json(name: str, body: str, description: str = "", tools: Sequence[str] = ()) -> str:
    src = {"body": normalize_text(body), "description": description, "name": name, "tools": list(tools)}
    return _struct(tuple((k, True) for k in SKILL_KEYS), src)


def skill_sha256(name: str, body: str, description: str = "", tools: Sequence[str] = ()) -> str:
    """loomcycle's `content_sha256` of a skill (skills.Sign)."""
    return _sign(skill_content_json(name, body, description, tools))
