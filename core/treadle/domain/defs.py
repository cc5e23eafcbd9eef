"""Definitions shared by every Def family: canonical hashing and the stored record."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any


def normalize_text(text: str) -> str:
    """Line endings to LF, trailing whitespace trimmed (prompt/body fields before hashing)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").rstrip()


def canonical_json(value: Any) -> str:
    """Sorted keys, no insignificant whitespace, UTF-8 kept as is; empty values are the caller's
    business (drop them before hashing so that `[]` and absent hash the same)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def content_sha256(hash_fields: dict[str, Any]) -> str:
    """`"sha256:" + hex` over the canonical JSON of the hash-significant fields, with empty
    values (None, "", [], {}) dropped so that absent and empty hash alike."""
    significant = {k: v for k, v in hash_fields.items() if v not in (None, "", [], {})}
    return "sha256:" + hashlib.sha256(canonical_json(significant).encode()).hexdigest()


@dataclass(slots=True)
class DefRecord:
    def_id: str
    tenant_id: str
    kind: str
    name: str
    version: int
    content_sha256: str
    body: dict[str, Any]
    parent_def_id: str | None
    status: str
    description: str
    created_by_run_id: str | None
    created_at: datetime
    retired_at: datetime | None
    active: bool = False
    #: treadle's earlier hash of the body (before loomcycle's became content_sha256; agents, skills)
    treadle_sha256: str | None = None

    def to_api(self) -> dict[str, Any]:
        return {
            "def_id": self.def_id,
            "kind": self.kind,
            "name": self.name,
            "version": self.version,
            "content_sha256": self.content_sha256,
            **({"treadle_sha256": self.treadle_sha256} if self.treadle_sha256 else {}),
            "body": self.body,
            "parent_def_id": self.parent_def_id,
            "status": self.status,
            "active": self.active,
            "description": self.description,
            "created_by_run_id": self.created_by_run_id,
            "created_at": self.created_at.isoformat(),
            "retired_at": self.retired_at.isoformat() if self.retired_at else None,
        }
