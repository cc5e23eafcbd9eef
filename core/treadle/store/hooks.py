"""Tool-use hooks as rows (core/treadle/hooks/ calls them)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from treadle.errors import Conflict
from treadle.store.db import Pool

_COLUMNS = ("id, tenant_id, owner, name, phase, agents, tools, callback_url, fail_mode, timeout_ms, secret_env,"
            " secret_credential, headers, created_at")


@dataclass(frozen=True, slots=True)
class HookRecord:
    id: str
    tenant_id: str
    owner: str
    name: str
    phase: str  # pre | post
    agents: list[str]  # empty: every agent
    tools: list[str]  # exact names or "prefix*"; empty: every tool
    callback_url: str
    fail_mode: str  # open | closed
    timeout_ms: int
    secret_env: str | None
    #: a CredentialDef name whose value signs the call (instead of secret_env)
    secret_credential: str | None
    #: sent with every call; values may reference `${credential.NAME}`
    headers: dict[str, str]
    created_at: datetime

    def matches(self, agent: str, tool: str) -> bool:
        if self.agents and agent not in self.agents:
            return False
        return not self.tools or any(
            tool.startswith(t[:-1]) if t.endswith("*") else tool == t for t in self.tools
        )

    def to_api(self) -> dict[str, Any]:
        return {"id": self.id, "owner": self.owner, "name": self.name, "phase": self.phase, "agents": self.agents,
                "tools": self.tools, "callback_url": self.callback_url, "fail_mode": self.fail_mode,
                "timeout_ms": self.timeout_ms, "secret_env": self.secret_env,
                "secret_credential": self.secret_credential, "headers": self.headers,
                "created_at": self.created_at.isoformat()}


def _record(row: dict[str, Any]) -> HookRecord:
    return HookRecord(**{k: row[k] for k in HookRecord.__dataclass_fields__})


class HookStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def create(self, tenant_id: str, fields: dict[str, Any]) -> HookRecord:
        hook_id = "hook_" + secrets.token_hex(8)
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""INSERT INTO tool_hooks (id, tenant_id, owner, name, phase, agents, tools, callback_url, fail_mode,
                                           timeout_ms, secret_env, secret_credential, headers)
                    VALUES (%(id)s, %(t)s, %(owner)s, %(name)s, %(phase)s, %(agents)s, %(tools)s, %(url)s,
                            %(fail)s, %(timeout)s, %(secret)s, %(secret_credential)s, %(headers)s)
                    ON CONFLICT (tenant_id, owner, name, phase) DO NOTHING RETURNING {_COLUMNS}""",
                {"id": hook_id, "t": tenant_id, "owner": fields["owner"], "name": fields["name"],
                 "phase": fields["phase"], "agents": Jsonb(fields["agents"]), "tools": Jsonb(fields["tools"]),
                 "url": fields["callback_url"], "fail": fields["fail_mode"], "timeout": fields["timeout_ms"],
                 "secret": fields.get("secret_env"), "secret_credential": fields.get("secret_credential"),
                 "headers": Jsonb(fields.get("headers") or {})},
            )
            row = await cur.fetchone()
        if row is None:
            raise Conflict(f"a {fields['phase']} hook {fields['owner']}/{fields['name']} exists; delete it first",
                           code="hook_exists")
        return _record(row)

    async def list(self, tenant_id: str) -> list[HookRecord]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(f"SELECT {_COLUMNS} FROM tool_hooks WHERE tenant_id = %s ORDER BY created_at, id",
                                     (tenant_id,))
            return [_record(r) for r in await cur.fetchall()]

    async def delete(self, tenant_id: str, hook_id: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute("DELETE FROM tool_hooks WHERE tenant_id = %s AND id = %s", (tenant_id, hook_id))
            return cur.rowcount == 1
