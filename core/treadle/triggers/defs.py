"""The ScheduleDef and WebhookDef families (loomcycle's op-input shape), over DefStore.

Input: `{"op": create|fork|get|list|retire|promote (+ family ops), "name", "def_id", "version",
"overlay", "description", "promote" (default true), "retired" (list: include retired)}`. The same
dispatch serves the built-in tools (with a scope gate) and POST /v1/_<family>def (operator); the
op routing and argument checks are the shared ones of treadle/defops.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from treadle.defops import STATIC_DESCRIPTION, DefOps, OpHandler, merge_overlay, opt_bool, opt_str
from treadle.domain.defs import DefRecord, content_sha256
from treadle.errors import Conflict, DefRefused
from treadle.ports import AgentDirectory
from treadle.specs.schedule import validation_message
from treadle.store.defs import DefStore

__all__ = ["STATIC_DESCRIPTION", "DefFamily", "DefRefused", "ScopeGate"]

SCOPE = re.compile(r"^(self|descendants|any|named:[A-Za-z0-9_-]{1,128})$")


@dataclass(frozen=True, slots=True)
class ScopeGate:
    """loomcycle's `*_def_scopes`: `self` (defs targeting the calling agent), `named:<agent>`,
    `any`; `descendants` is accepted but grants nothing here (treadle has no agent lineage).
    Empty = deny everything (default-deny)."""

    scopes: tuple[str, ...]
    self_agent: str
    field: str

    def allows(self, agent: str | None) -> bool:
        if "any" in self.scopes:
            return True
        if agent is None:
            return False
        return (agent == self.self_agent and "self" in self.scopes) or f"named:{agent}" in self.scopes

    def check(self, agent: str | None, what: str) -> None:
        if not self.scopes:
            raise DefRefused(f"{what}: denied — the agent's {self.field} is empty (default-deny)")
        if not self.allows(agent):
            target = f"agent {agent!r}" if agent else "a def without an agent"
            raise DefRefused(f"{what}: {target} is outside this agent's {self.field} ({', '.join(self.scopes)})")


class DefFamily(DefOps):
    """One trigger def kind. Subclasses set `kind`, `label`, `spec` and may override the hooks."""

    spec: type[BaseModel] = BaseModel
    extra_ops: tuple[str, ...] = ()

    def __init__(self, defs: DefStore, agents: AgentDirectory) -> None:
        super().__init__(defs)
        self.agents = agents

    # -- family hooks ------------------------------------------------------------------------------

    async def normalize(self, tenant_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Validate a body; returns the normalized body (DefRefused when invalid)."""
        try:
            spec = self.spec.model_validate(body)
        except ValidationError as exc:
            raise DefRefused(f"invalid {self.label}: {validation_message(exc)}") from None
        await self.check(tenant_id, spec)
        out: dict[str, Any] = spec.body() if hasattr(spec, "body") else spec.model_dump(mode="json")
        return out

    async def check(self, tenant_id: str, spec: Any) -> None:
        """Cross-checks against the runtime (e.g. the agent exists)."""

    async def check_agent(self, tenant_id: str, agent: str) -> None:
        """DefRefused unless `agent` is a treadle.yaml agent or one of the tenant's promoted
        AgentDefs (what a run started by this trigger would get)."""
        if await self.agents.current(tenant_id, agent) is not None:
            return
        known = ", ".join(self.agents.static_names()) or "none"
        raise DefRefused(f"invalid {self.label}: agent: unknown agent {agent!r} (configured: {known}; "
                         "or a promoted AgentDef)")

    def target_agent(self, body: dict[str, Any]) -> str | None:
        agent = body.get("agent")
        return agent if isinstance(agent, str) else None

    async def activated(self, tenant_id: str, record: DefRecord) -> None:
        """`record` just became the active version of its name."""

    async def retired(self, tenant_id: str, record: DefRecord) -> None:
        """`record` (the active version) was retired; its name has no active version now."""

    async def view(self, tenant_id: str, record: DefRecord) -> dict[str, Any]:
        return record.to_api()

    # -- dispatch ----------------------------------------------------------------------------------

    def handlers(self) -> dict[str, OpHandler]:
        return {
            "create": self.op_create,
            "fork": self.op_fork,
            "get": self.op_get,
            "list": self.op_list,
            "retire": self.op_retire,
            "promote": self.op_promote,
        }

    async def op_create(self, tenant: str, args: dict[str, Any], gate: ScopeGate | None, run_id: str | None) -> Any:
        name = self.name_arg(args)
        body = await self.normalize(tenant, self.overlay_arg(args, required=True))
        if gate is not None:
            gate.check(self.target_agent(body), f"{self.label}.create")
        active = await self.defs.get(tenant, self.kind, name=name)
        if active is not None:
            raise Conflict(f"{self.label} {name!r} exists (version {active.version}); fork it to change it")
        return await self._store(tenant, name, body, args, parent=None, run_id=run_id)

    async def op_fork(self, tenant: str, args: dict[str, Any], gate: ScopeGate | None, run_id: str | None) -> Any:
        parent = await self.resolve(tenant, args)
        if gate is not None:
            gate.check(self.target_agent(parent.body), f"{self.label}.fork")
        body = await self.normalize(tenant, merge_overlay(parent.body, self.overlay_arg(args, required=False)))
        if gate is not None:
            gate.check(self.target_agent(body), f"{self.label}.fork")
        name = self.name_arg(args) if args.get("def_id") and args.get("name") else parent.name
        if name == parent.name and parent.active and content_sha256(body) == parent.content_sha256:
            return {**await self.view(tenant, parent), "deduplicated": True}
        return await self._store(tenant, name, body, args, parent=parent, run_id=run_id)

    async def op_get(self, tenant: str, args: dict[str, Any], gate: ScopeGate | None, run_id: str | None) -> Any:
        record = await self.resolve(tenant, args)
        if gate is not None:
            gate.check(self.target_agent(record.body), f"{self.label}.get")
        out = await self.view(tenant, record)
        if args.get("include_lineage"):
            out["lineage"] = [r.to_api() for r in await self.defs.lineage(tenant, self.kind, record.def_id)]
        return out

    async def op_list(self, tenant: str, args: dict[str, Any], gate: ScopeGate | None, run_id: str | None) -> Any:
        include_retired = bool(args.get("retired") or args.get("include_retired"))
        name = opt_str(args, "name", max_len=128)
        records = await self.defs.list(tenant, self.kind, name=name, include_retired=include_retired)
        if gate is not None:
            if not gate.scopes:
                gate.check(None, f"{self.label}.list")
            records = [r for r in records if gate.allows(self.target_agent(r.body))]
        return {"defs": [await self.view(tenant, r) for r in records], "count": len(records)}

    async def op_retire(self, tenant: str, args: dict[str, Any], gate: ScopeGate | None, run_id: str | None) -> Any:
        record = await self.resolve(tenant, args)
        if gate is not None:
            gate.check(self.target_agent(record.body), f"{self.label}.retire")
        was_active = record.active
        record = await self.defs.retire(tenant, self.kind, record.def_id)
        if was_active:
            await self.retired(tenant, record)
        return await self.view(tenant, record)

    async def op_promote(self, tenant: str, args: dict[str, Any], gate: ScopeGate | None, run_id: str | None) -> Any:
        if not opt_str(args, "def_id", max_len=64):
            raise DefRefused(f"{self.label}.promote: def_id is required")
        record = await self.resolve(tenant, args)
        if gate is not None:
            gate.check(self.target_agent(record.body), f"{self.label}.promote")
        record = await self.defs.promote(tenant, self.kind, record.def_id)
        await self.activated(tenant, record)
        return await self.view(tenant, record)

    # -- helpers -----------------------------------------------------------------------------------

    async def _store(
        self, tenant: str, name: str, body: dict[str, Any], args: dict[str, Any], *, parent: DefRecord | None,
        run_id: str | None,
    ) -> dict[str, Any]:
        promote = opt_bool(args, "promote", True)
        description = self.description_arg(args, parent, max_len=1024)
        record = await self.store(tenant, name, body, parent_def_id=parent.def_id if parent else None,
                                  description=description, promote=promote, run_id=run_id)
        return await self.view(tenant, record)

    async def store(
        self, tenant: str, name: str, body: dict[str, Any], *, parent_def_id: str | None, description: str,
        promote: bool, run_id: str | None = None,
    ) -> DefRecord:
        record = await self.defs.create(
            tenant, self.kind, name, body, content_sha256(body), parent_def_id=parent_def_id,
            description=description, promote=promote, created_by_run_id=run_id,
        )
        if promote:
            await self.activated(tenant, record)
        return record

    async def active_names(self, tenant_id: str) -> list[str]:
        """The names with an active version."""
        return sorted({r.name for r in await self.defs.list(tenant_id, self.kind) if r.active})
