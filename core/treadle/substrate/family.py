"""Op dispatch shared by AgentDef and SkillDef (loomcycle's op-input shape), over DefStore.

Input: `{"op": create|fork|get|list|retire|promote|verify, "name", "def_id", "version", "overlay",
"description", "promote", "include_lineage", "include_retired", "content_sha256"}`. The same
dispatch serves the built-in tools (with a `Gate`: the calling agent's `*_def_scopes`, and no
widening of what it may grant) and POST /v1/_agentdef | /v1/_skilldef (the operator, no gate).

Names declared in treadle.yaml are the static base: `create` refuses them, `fork` of such a name
first records the yaml definition as version 1 (description "from treadle.yaml"), and a promoted
version overrides the yaml one for new runs. `retire` of the active version falls back to yaml.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from treadle.defops import STATIC_DESCRIPTION, DefOps, OpHandler, merge_overlay, opt_bool, opt_str
from treadle.domain.defs import DefRecord
from treadle.errors import Conflict, DefRefused


@dataclass(frozen=True, slots=True)
class Gate:
    """What a calling agent may do through a *Def tool: `scopes` (self | named:<name> | any;
    empty = deny everything), `own` (the names `self` covers), and the grants (tools, scopes)
    it holds itself — a def it writes may carry only those, or what its parent already had."""

    scopes: tuple[str, ...]
    field: str
    own: frozenset[str]
    grants: dict[str, frozenset[str]]

    def allows(self, name: str) -> bool:
        return "any" in self.scopes or f"named:{name}" in self.scopes or (name in self.own and "self" in self.scopes)

    def check(self, name: str, what: str) -> None:
        if not self.scopes:
            raise DefRefused(f"{what}: denied — the agent's {self.field} is empty (default-deny)")
        if not self.allows(name):
            raise DefRefused(f"{what}: {name!r} is outside this agent's {self.field} ({', '.join(self.scopes)})")

    def check_grants(self, body: dict[str, Any], parent: dict[str, Any] | None, what: str) -> None:
        for key, held in self.grants.items():
            inherited = set(parent.get(key) or []) if parent else set()
            extra = sorted(set(body.get(key) or []) - held - inherited)
            if extra:
                raise DefRefused(f"{what}: {key} {extra} would widen what this agent holds itself (a def written "
                                 f"through a tool may carry only the calling agent's own {key} or its parent's)")


class SubstrateFamily(DefOps):
    """One substrate def kind. Subclasses set `kind`, `label` and implement the hooks."""

    fork_promotes = False

    # -- hooks ------------------------------------------------------------------------------------

    @abstractmethod
    def validate(self, name: str, overlay: dict[str, Any]) -> dict[str, Any]:
        """The normalized body (DefRefused when invalid)."""
        ...

    @abstractmethod
    def content_hash(self, body: dict[str, Any]) -> str:
        ...

    @abstractmethod
    def static_body(self, name: str) -> dict[str, Any] | None:
        """The normalized body of a treadle.yaml definition of `name`, if any."""
        ...

    @abstractmethod
    def static_names(self) -> list[str]:
        ...

    def effective(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body with defaults filled in (what a grant check compares)."""
        return body

    # -- dispatch ---------------------------------------------------------------------------------

    def handlers(self) -> dict[str, OpHandler]:
        return {
            "create": self.op_create, "fork": self.op_fork, "get": self.op_get, "list": self.op_list,
            "retire": self.op_retire, "promote": self.op_promote, "verify": self.op_verify,
        }

    # -- ops --------------------------------------------------------------------------------------

    async def op_create(self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None) -> Any:
        name = self.name_arg(args)
        what = f"{self.label}.create"
        if gate is not None:
            gate.check(name, what)
        body = self.validate(name, self.overlay_arg(args, required=True))
        if gate is not None:
            gate.check_grants(self.effective(body), None, what)
        if self.static_body(name) is not None:
            raise DefRefused(f"{what}: {name!r} is declared in treadle.yaml; fork it to override it")
        active = await self.defs.get(tenant, self.kind, name=name)
        if active is not None:
            if active.body == body:
                return {**self.view(active), "deduplicated": True}
            raise Conflict(f"{self.label} {name!r} exists (version {active.version}); fork it to change it")
        record = await self._store(tenant, name, body, args, parent=None, run_id=run_id, promote_default=True)
        return self.view(record)

    async def op_fork(self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None) -> Any:
        what = f"{self.label}.fork"
        parent = await self._fork_parent(tenant, args, gate, what)
        name = self.name_arg(args) if args.get("def_id") and args.get("name") else parent.name
        if gate is not None and name != parent.name:
            gate.check(name, what)
        if name != parent.name and self.static_body(name) is not None:
            raise DefRefused(f"{what}: {name!r} is declared in treadle.yaml; fork that name itself")
        body = self.validate(name, merge_overlay(parent.body, self.overlay_arg(args, required=False)))
        if gate is not None:
            gate.check_grants(self.effective(body), self.effective(parent.body), what)
        if name == parent.name and body == parent.body:  # nothing changes: no identical new version
            if opt_bool(args, "promote", self.fork_promotes) and not parent.active:
                parent = await self.defs.promote(tenant, self.kind, parent.def_id)
            return {**self.view(parent), "deduplicated": True}
        record = await self._store(tenant, name, body, args, parent=parent, run_id=run_id,
                                   promote_default=self.fork_promotes)
        return self.view(record)

    async def op_get(self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None) -> Any:
        record = await self.resolve_static_ok(tenant, args)
        if gate is not None:
            gate.check(record.name, f"{self.label}.get")
        out = self.view(record)
        if opt_bool(args, "include_lineage", False) and record.def_id:
            out["lineage"] = [self.view(r) for r in await self.defs.lineage(tenant, self.kind, record.def_id)]
        return out

    async def op_list(self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None) -> Any:
        include_retired = opt_bool(args, "include_retired", False) or opt_bool(args, "retired", False)
        name = opt_str(args, "name", max_len=128)
        if gate is not None and not gate.scopes:
            gate.check(name or "*", f"{self.label}.list")
        records = await self.defs.list(tenant, self.kind, name=name, include_retired=include_retired)
        active_names = {r.name for r in records if r.active}
        statics = [n for n in self.static_names() if name is None or n == name]
        if gate is not None:
            records = [r for r in records if gate.allows(r.name)]
            statics = [n for n in statics if gate.allows(n)]
        static_views = []
        for n in statics:
            view = self.view(self.static_record(tenant, n))
            view["overridden"] = n in active_names
            view["active"] = n not in active_names
            static_views.append(view)
        return {"defs": [self.view(r) for r in records], "count": len(records), "static": static_views}

    async def op_retire(self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None) -> Any:
        record = await self.resolve(tenant, args)
        if gate is not None:
            gate.check(record.name, f"{self.label}.retire")
        return self.view(await self.defs.retire(tenant, self.kind, record.def_id))

    async def op_promote(self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None) -> Any:
        if not opt_str(args, "def_id", max_len=64):
            raise DefRefused(f"{self.label}.promote: def_id is required")
        record = await self.resolve(tenant, args)
        if gate is not None:
            gate.check(record.name, f"{self.label}.promote")
        return self.view(await self.defs.promote(tenant, self.kind, record.def_id))

    async def op_verify(self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None) -> Any:
        """Compare a locally computed hash with what runs of `name` get now."""
        name = self.name_arg(args)
        local = opt_str(args, "content_sha256", max_len=128)
        if not local:
            raise DefRefused(f"{self.label}.verify: content_sha256 (the local hash) is required")
        if gate is not None:
            gate.check(name, f"{self.label}.verify")
        current = await self.current(tenant, name)
        if current is None:
            return {"name": name, "matches": False, "deployed": False, "current_sha256": None,
                    "current_def_id": None, "version": None, "source": None}
        return {"name": name, "matches": current.content_sha256 == local, "deployed": True,
                "current_sha256": current.content_sha256, "current_def_id": current.def_id or None,
                "version": current.version, "source": "runtime" if current.def_id else "yaml"}

    # -- helpers ----------------------------------------------------------------------------------

    async def active_names(self, tenant_id: str) -> list[str]:
        """The names new runs can use: promoted versions and treadle.yaml definitions."""
        records = await self.defs.list(tenant_id, self.kind)
        return sorted({r.name for r in records if r.active} | set(self.static_names()))

    async def current(self, tenant: str, name: str) -> DefRecord | None:
        """What a new run of `name` gets: the promoted runtime version, else the yaml one."""
        record = await self.defs.get(tenant, self.kind, name=name)
        if record is None and self.static_body(name) is not None:
            record = self.static_record(tenant, name)
        return record

    def static_record(self, tenant: str, name: str) -> DefRecord:
        body = self.static_body(name)
        assert body is not None
        from datetime import UTC, datetime

        return DefRecord(def_id="", tenant_id=tenant, kind=self.kind, name=name, version=0,
                         content_sha256=self.content_hash(body), body=body, parent_def_id=None, status="active",
                         description=STATIC_DESCRIPTION, created_by_run_id=None,
                         created_at=datetime.fromtimestamp(0, UTC), retired_at=None, active=True)

    def view(self, record: DefRecord) -> dict[str, Any]:
        if not record.def_id:
            return {"def_id": None, "kind": record.kind, "name": record.name, "version": None,
                    "content_sha256": record.content_sha256, "body": record.body, "parent_def_id": None,
                    "status": "active", "active": record.active, "description": record.description,
                    "source": "yaml"}
        return {**record.to_api(), "source": "runtime"}

    async def resolve_static_ok(self, tenant: str, args: dict[str, Any]) -> DefRecord:
        """`resolve`, where a name without an active version falls back to its treadle.yaml
        definition before its newest retired version."""

        def static(name: str) -> DefRecord | None:
            return self.static_record(tenant, name) if self.static_body(name) is not None else None

        return await self.resolve(tenant, args, fallback=static)

    async def _fork_parent(self, tenant: str, args: dict[str, Any], gate: Gate | None, what: str) -> DefRecord:
        """The version a fork starts from; a treadle.yaml definition is first recorded as a
        version (reused when an identical one exists)."""
        parent = await self.resolve_static_ok(tenant, args)
        if gate is not None:
            gate.check(parent.name, what)
        if parent.def_id:
            return parent
        for r in await self.defs.list(tenant, self.kind, name=parent.name, limit=1000):
            if r.content_sha256 == parent.content_sha256 and r.body == parent.body:
                return r
        return await self.defs.create(tenant, self.kind, parent.name, parent.body, parent.content_sha256,
                                      description=STATIC_DESCRIPTION, promote=False)

    async def _store(
        self, tenant: str, name: str, body: dict[str, Any], args: dict[str, Any], *, parent: DefRecord | None,
        run_id: str | None, promote_default: bool,
    ) -> DefRecord:
        promote = opt_bool(args, "promote", promote_default)
        description = self.description_arg(args, parent, max_len=4096)
        return await self.defs.create(
            tenant, self.kind, name, body, self.content_hash(body), parent_def_id=parent.def_id if parent else None,
            description=description, promote=promote, created_by_run_id=run_id,
        )
