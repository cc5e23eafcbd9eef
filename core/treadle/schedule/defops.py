"""Op dispatch shared by ScheduleDef and WebhookDef (loomcycle's op-input shape), over DefStore.

Input: `{"op": create|fork|get|list|retire|promote (+ family ops), "name", "def_id", "version",
"overlay", "description", "promote" (default true), "retired" (list: include retired)}`. The same
dispatch serves the built-in tools (with a scope gate) and POST /v1/_<family>def (operator).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from treadle.domain.defs import DefRecord, content_sha256
from treadle.errors import Conflict, DefRefused, NotFound
from treadle.schedule.spec import validation_message
from treadle.store.defs import DefStore

if TYPE_CHECKING:
    from treadle.runtime import Runtime

NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
SCOPE = re.compile(r"^(self|descendants|any|named:[A-Za-z0-9_-]{1,128})$")
STATIC_DESCRIPTION = "from treadle.yaml"


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


def _str(args: dict[str, Any], key: str, *, max_len: int = 1024) -> str | None:
    v = args.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or len(v) > max_len:
        raise DefRefused(f"{key} must be a string (≤{max_len} characters)")
    return v


class DefFamily:
    """One def kind. Subclasses set `kind`, `label`, `spec` and may override the hooks."""

    kind = ""
    label = ""
    spec: type[BaseModel] = BaseModel
    extra_ops: tuple[str, ...] = ()

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.defs = DefStore(rt.pool)

    # -- family hooks ------------------------------------------------------------------------------

    def normalize(self, body: dict[str, Any]) -> dict[str, Any]:
        """Validate a body; returns the normalized body (DefRefused when invalid)."""
        try:
            spec = self.spec.model_validate(body)
        except ValidationError as exc:
            raise DefRefused(f"invalid {self.label}: {validation_message(exc)}") from None
        self.check(spec)
        out: dict[str, Any] = spec.body() if hasattr(spec, "body") else spec.model_dump(mode="json")
        return out

    def check(self, spec: Any) -> None:
        """Cross-checks against the runtime (e.g. the agent exists)."""

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

    def handlers(self) -> dict[str, Callable[[str, dict[str, Any], ScopeGate | None, str | None], Awaitable[Any]]]:
        return {
            "create": self.op_create,
            "fork": self.op_fork,
            "get": self.op_get,
            "list": self.op_list,
            "retire": self.op_retire,
            "promote": self.op_promote,
        }

    async def dispatch(
        self, tenant_id: str, args: Any, *, gate: ScopeGate | None = None, run_id: str | None = None
    ) -> dict[str, Any]:
        if not isinstance(args, dict):
            raise DefRefused(f"{self.label}: the input must be a JSON object")
        handlers = self.handlers()
        op = args.get("op")
        if op not in handlers:
            raise DefRefused(f"{self.label}: op must be one of {', '.join(handlers)}")
        result: dict[str, Any] = await handlers[op](tenant_id, args, gate, run_id)
        return result

    async def op_create(self, tenant: str, args: dict[str, Any], gate: ScopeGate | None, run_id: str | None) -> Any:
        name = self._name(args)
        overlay = self._overlay(args, required=True)
        body = self.normalize(overlay)
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
        merged = {**parent.body}
        for k, v in self._overlay(args, required=False).items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        body = self.normalize(merged)
        if gate is not None:
            gate.check(self.target_agent(body), f"{self.label}.fork")
        name = self._name(args) if args.get("def_id") and args.get("name") else parent.name
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
        name = _str(args, "name", max_len=128)
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
        def_id = _str(args, "def_id", max_len=64)
        if not def_id:
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
        promote = args.get("promote", True)
        if not isinstance(promote, bool):
            raise DefRefused("promote must be a boolean")
        description = _str(args, "description")
        if description is None:
            description = parent.description if parent is not None and parent.description != STATIC_DESCRIPTION else ""
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

    async def resolve(self, tenant: str, args: dict[str, Any]) -> DefRecord:
        """By def_id; or name (+ version); or name alone → its active version, else its newest."""
        def_id = _str(args, "def_id", max_len=64)
        version = args.get("version")
        if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
            raise DefRefused("version must be a positive integer")
        record: DefRecord | None
        if def_id:
            record = await self.defs.get(tenant, self.kind, def_id=def_id)
            what = f"def {def_id!r}"
        else:
            name = self._name(args)
            what = f"{name!r}" + (f" version {version}" if version else "")
            record = await self.defs.get(tenant, self.kind, name=name, version=version)
            if record is None and version is None:
                versions = await self.defs.list(tenant, self.kind, name=name, include_retired=True, limit=1)
                record = versions[0] if versions else None
        if record is None:
            raise NotFound(f"{self.label} {what} not found")
        return record

    def _name(self, args: dict[str, Any]) -> str:
        name = args.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise DefRefused(f"{self.label}: name is required and must match [A-Za-z0-9_-]{{1,128}}")
        return name

    def _overlay(self, args: dict[str, Any], *, required: bool) -> dict[str, Any]:
        overlay = args.get("overlay")
        if overlay is None and not required:
            return {}
        if not isinstance(overlay, dict):
            raise DefRefused(f"{self.label}: overlay (the def's fields, an object) is required")
        return dict(overlay)
