"""Payload mapping: a strict JSONPath projection of a verified payload into a run's input.

Paths are RFC 9535 *singular queries* (python-jsonpath, strict mode): `$`, `.name`, `['name']`
and `[index]` only — wildcards, slices, filters and recursive descent are refused when the def is
created. Every mapped value becomes an `untrusted-block` (fenced as untrusted data, never
trusted text); the special target `user_id` sets the run's user instead (it must be an ident).
A required path that is absent → 422 `mapping_failed` and nothing starts.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from treadle.domain.ids import is_identifier
from treadle.errors import MappingFailed as MappingFailed  # re-exported: raised by project()

if TYPE_CHECKING:
    from jsonpath import JSONPath
MAX_VALUE_CHARS = 64 * 1024


@lru_cache(maxsize=1024)
def _compile(path: str) -> JSONPath:
    # imported here: python-jsonpath costs ~35 ms to import, which functions that never map a
    # payload (the cloud worker, say) should not pay
    from jsonpath import JSONPath, JSONPathEnvironment

    query = JSONPathEnvironment(strict=True).compile(path)
    if not isinstance(query, JSONPath) or not query.singular_query():
        raise ValueError("not singular")
    return query


def compile_path(path: str, target: str = "") -> JSONPath:
    """The compiled path; ValueError (a def validation error) unless it is a singular query."""
    where = f"payload_mapping.{target}: " if target else ""
    if not isinstance(path, str) or not path.startswith("$") or len(path) > 512:
        raise ValueError(f"{where}a path starts with '$' (e.g. $.issue.title)")
    from jsonpath.exceptions import JSONPathError

    try:
        return _compile(path)
    except (JSONPathError, ValueError):
        raise ValueError(
            f"{where}{path!r} is not a strict path: only $, .name, ['name'] and [index] are allowed"
            " (no wildcards, slices, filters or '..')"
        ) from None


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "…[truncated]"


def project(payload: Any, entries: list[tuple[str, str, bool]]) -> tuple[list[dict[str, Any]], str | None]:
    """(untrusted blocks, user_id or None) from `entries` of (target, path, required)."""
    blocks: list[dict[str, Any]] = []
    user_id: str | None = None
    missing: list[str] = []
    for target, path, required in entries:
        match = compile_path(path, target).match(payload)
        if match is None:
            if required:
                missing.append(f"{target} ({path})")
            continue
        if target == "user_id":
            if not isinstance(match.obj, str | int) or isinstance(match.obj, bool) or not is_identifier(str(match.obj)):
                raise MappingFailed(f"payload_mapping.user_id: {path} is not an identifier ([A-Za-z0-9_-]{{1,128}})")
            user_id = str(match.obj)
            continue
        blocks.append({"type": "untrusted-block", "kind": "untrusted", "text": f"{target}: {_text(match.obj)}"})
    if missing:
        raise MappingFailed("required payload fields are missing: " + ", ".join(missing))
    return blocks, user_id


def raw_block(body: bytes) -> dict[str, Any]:
    """Without a mapping, the whole body is the (untrusted) input."""
    return {"type": "untrusted-block", "kind": "untrusted", "text": _text(body.decode("utf-8", errors="replace"))}
