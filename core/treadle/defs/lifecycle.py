"""The one def lifecycle — create, fork, get, list, retire, promote, verify — for every def kind.

Shaped like Powertools' idempotency persistence layer: `DefLifecycle` owns the whole lifecycle
(op routing, argument checks, finding a version, folding an overlay into a body, dedupe, the
treadle.yaml base, gate checks, activation and retirement) over the shared `DefStore`; a kind
fills in a few small hooks. Each rule below is written once, here, so the kinds cannot drift:

- booleans (`promote`, `include_lineage`, `include_retired`/`retired`) are JSON booleans or absent;
  anything else is refused. `list` takes either spelling of the retired switch (loomcycle's
  `retired`, treadle's `include_retired`); both given and different is refused.
- a version's `description` is at most 4096 characters; a fork inherits its parent's (never the
  "from treadle.yaml" marker).
- `create` of a name whose active version has the identical body (and, when given, the same
  description) answers that version with `deduplicated: true`; any other clash is a Conflict.
- `fork` with the same name, an identical body and no new description records nothing new: it
  answers the parent with `deduplicated: true` (promoting it when `promote` says so) — unless the
  parent is retired, which a fork revives as a new version.
- `promote` defaults are a per-kind setting (`create_promotes`, `fork_promotes`), part of
  loomcycle's tool contract.
- `list` answers `{"defs", "count", "static"}` for every kind (`static`: the treadle.yaml base).
- `verify` is offered by every kind.
- with a gate, an empty scope list refuses every op before its input is read; the subject is
  checked on the input as given and again on the normalized body (and on a fork's parent).

Adding a kind (MCP server defs, operator tokens, ...)
-----------------------------------------------------
1. Subclass `DefLifecycle`; set `kind` (the `defs.kind` column, e.g. "mcp_server"), `label` (the
   tool's name, e.g. "MCPServerDef") and, where loomcycle's contract differs from the defaults,
   `create_promotes` / `fork_promotes`. Take `DefStore` and ports in the constructor — never
   the runtime.
2. Implement `normalize(tenant, name, body)` (the validated, normalized body, or DefRefused —
   `parse_spec` does the pydantic part) and `content_hash(body)` (what makes two bodies one def).
3. Override only what differs from the defaults: `gate_subject` (default: the def's name),
   `granted`, `static_names`/`static_body` (a treadle.yaml base), `on_activate`/`on_retire`
   (keep state outside the defs table in step), `view` (extra answer fields), and `extra_ops`
   with one `op_<name>` method each.
4. Wire it: the runtime's `_OpServices` (`ctx.services.ops[label]`), `add_def_routes` for
   `/v1/_<kind>def`, and a built-in tool whose schema is `def_tool_schema(...)` and whose
   `invoke` is `run_op(ctx, family, gate, args)` (treadle.defs.tooling).
5. Add the kind to the parametrized lifecycle test (tests/substrate/test_def_lifecycle.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from treadle.defs.args import MAX_DESCRIPTION, STATIC_DESCRIPTION, merge_overlay, opt_bool, opt_str
from treadle.defs.gates import Gate, require_scopes
from treadle.domain.defs import DefRecord
from treadle.domain.ids import is_identifier
from treadle.errors import Conflict, DefRefused, NotFound
from treadle.store.defs import DefStore

#: the ops every kind offers; a kind adds its own through `extra_ops`
CORE_OPS = ("create", "fork", "get", "list", "retire", "promote", "verify")
#: (tenant, op input, gate or None for the operator, the calling run or None) → the op's JSON answer
OpHandler = Callable[[str, dict[str, Any], Gate | None, str | None], Awaitable[dict[str, Any]]]
#: how far back a fork of a treadle.yaml def looks for an identical recorded version
_STATIC_REUSE_SCAN = 1000


class DefLifecycle(ABC):
    """One def kind's lifecycle over the shared DefStore. See the module docstring for the rules
    and for how to add a kind."""

    #: the `defs.kind` column
    kind: str = ""
    #: the tool's name; prefixes refusals ("AgentDef.fork: ...")
    label: str = ""
    #: what `promote` defaults to on create and on fork
    create_promotes: bool = True
    fork_promotes: bool = False
    #: ops of this kind beyond CORE_OPS, each served by a method `op_<name>` (an OpHandler)
    extra_ops: tuple[str, ...] = ()
    #: core ops this kind does not offer (refused like an unknown op)
    excluded_ops: tuple[str, ...] = ()

    def __init__(self, defs: DefStore) -> None:
        self.defs = defs

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for op in cls.extra_ops:
            if op in CORE_OPS or not callable(getattr(cls, f"op_{op}", None)):
                raise TypeError(f"{cls.__name__}: extra op {op!r} needs a method op_{op} (and a new name)")

    @classmethod
    def ops(cls) -> tuple[str, ...]:
        return (*(op for op in CORE_OPS if op not in cls.excluded_ops), *cls.extra_ops)

    # -- hooks -------------------------------------------------------------------------------------

    @abstractmethod
    async def normalize(self, tenant: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """The validated, normalized body (DefRefused when invalid). Two inputs that mean the same
        def must normalize to equal bodies: dedupe compares normalized bodies."""

    @abstractmethod
    def content_hash(self, body: dict[str, Any]) -> str:
        """`sha256:<hex>` over what makes the def behave as it does (treadle.domain.defs)."""

    def named_content_hash(self, name: str, body: dict[str, Any]) -> str:
        """The `content_sha256` stored for `name` with `body`: by default `content_hash(body)`;
        AgentDef and SkillDef hash as loomcycle does (the name is part of it)."""
        return self.content_hash(body)

    def treadle_hash(self, body: dict[str, Any]) -> str | None:
        """treadle's earlier hash where it differs from content_sha256 (agents, skills), else None."""
        return None

    async def rehash_legacy(self) -> int:
        """Give rows written before loomcycle's hash (migration 0018) their loomcycle hash; the
        earlier one stays readable as `treadle_sha256`. Returns how many rows changed."""
        rows = await self.defs.legacy_hashed(self.kind) if self.treadle_hash({}) is not None else []
        for r in rows:
            await self.defs.rehash(r.def_id, self.named_content_hash(r.name, r.body))
        return len(rows)

    def create_refreshes(self, active: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
        """Whether `create` of a name whose active version has another body makes a new version
        of it (a child of the active one, promoted as create promotes) instead of a conflict. By
        default not: `fork` changes a def."""
        return False

    def gate_subject(self, name: str, body: Mapping[str, Any] | None) -> str | None:
        """What a caller's scopes are checked against: by default the def's name. `body` is None
        when there is no def (verify of a name with nothing deployed)."""
        return name

    def granted(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """The body's grant fields with their defaults filled in (what `Gate.check_grants`
        compares); by default the body itself."""
        return body

    def static_names(self) -> list[str]:
        """The names treadle.yaml declares for this kind as a virtual base (none by default)."""
        return []

    def static_body(self, name: str) -> dict[str, Any] | None:
        """The normalized body of treadle.yaml's definition of `name`, if any."""
        return None

    async def on_activate(self, tenant: str, record: DefRecord) -> None:
        """`record` just became the active version of its name."""
        return None

    async def on_retire(self, tenant: str, record: DefRecord) -> None:
        """`record`, the active version of its name, was retired: the name has no active version."""
        return None

    async def view(self, tenant: str, record: DefRecord) -> dict[str, Any]:
        """A def as ops answer it; a kind may add fields (call `record_view` for the base)."""
        return self.record_view(record)

    # -- dispatch ----------------------------------------------------------------------------------

    async def dispatch(
        self, tenant_id: str, args: Any, *, gate: Gate | None = None, run_id: str | None = None
    ) -> dict[str, Any]:
        """Run one op input `{"op": ..., ...}`: for the operator (no gate) or a calling agent's
        tool (its gate; `run_id` is recorded on the versions it creates)."""
        if not isinstance(args, dict):
            raise DefRefused(f"{self.label}: the input must be a JSON object")
        op = args.get("op")
        if not isinstance(op, str) or op not in self.ops():
            raise DefRefused(f"{self.label}: op must be one of {', '.join(self.ops())}")
        handler: OpHandler = getattr(self, f"op_{op}")
        return await handler(tenant_id, args, gate, run_id)

    # -- the ops -----------------------------------------------------------------------------------

    async def op_create(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        what = self.what("create")
        if gate is not None:
            require_scopes(gate, what)
        name = self.name_arg(args)
        overlay = self.overlay_arg(args, required=True)
        promote = opt_bool(args, "promote", self.create_promotes, what=what)
        description = opt_str(args, "description", max_len=MAX_DESCRIPTION, what=what)
        self.check_gate(gate, name, overlay, what)
        body = await self.normalize(tenant, name, overlay)
        self.check_gate(gate, name, body, what)
        if gate is not None:
            gate.check_grants(self.granted(body), None, what)
        if self.static_body(name) is not None:
            raise DefRefused(f"{what}: {name!r} is declared in treadle.yaml; fork it to override it")
        active = await self.defs.get(tenant, self.kind, name=name)
        if active is not None:
            if active.body == body and description in (None, active.description):
                return {**await self.view(tenant, active), "deduplicated": True}
            if self.create_refreshes(active.body, body):
                record = await self.store(tenant, name, body, parent_def_id=active.def_id,
                                          description=active.description if description is None else description,
                                          promote=promote, run_id=run_id)
                return await self.view(tenant, record)
            raise Conflict(f"{self.label} {name!r} exists (version {active.version}) with another body or "
                           "description; fork it to change it")
        record = await self.store(tenant, name, body, parent_def_id=None, description=description or "",
                                  promote=promote, run_id=run_id)
        return await self.view(tenant, record)

    async def op_fork(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        what = self.what("fork")
        if gate is not None:
            require_scopes(gate, what)
        parent = await self.resolve(tenant, args, static_ok=True)
        self.check_gate(gate, parent.name, parent.body, what)
        name = self.name_arg(args) if args.get("def_id") and args.get("name") else parent.name
        merged = merge_overlay(parent.body, self.overlay_arg(args, required=False))
        promote = opt_bool(args, "promote", self.fork_promotes, what=what)
        description = opt_str(args, "description", max_len=MAX_DESCRIPTION, what=what)
        self.check_gate(gate, name, merged, what)
        if name != parent.name and self.static_body(name) is not None:
            raise DefRefused(f"{what}: {name!r} is declared in treadle.yaml; fork that name itself")
        body = await self.normalize(tenant, name, merged)
        self.check_gate(gate, name, body, what)
        if gate is not None:
            gate.check_grants(self.granted(body), self.granted(parent.body), what)
        if not parent.def_id:  # a treadle.yaml def: recorded as a version first
            parent = await self.record_static(tenant, parent)
        if (name == parent.name and body == parent.body and parent.status == "active"
                and description in (None, parent.description)):
            if promote and not parent.active:
                parent = await self.promote(tenant, parent)
            return {**await self.view(tenant, parent), "deduplicated": True}
        if description is None:  # inherited, but never the yaml marker
            description = "" if parent.description == STATIC_DESCRIPTION else parent.description
        record = await self.store(tenant, name, body, parent_def_id=parent.def_id, description=description,
                                  promote=promote, run_id=run_id)
        return await self.view(tenant, record)

    async def op_get(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        what = self.what("get")
        if gate is not None:
            require_scopes(gate, what)
        lineage = opt_bool(args, "include_lineage", False, what=what)
        record = await self.resolve(tenant, args, static_ok=True)
        self.check_gate(gate, record.name, record.body, what)
        out = await self.view(tenant, record)
        if lineage:
            chain = await self.defs.lineage(tenant, self.kind, record.def_id) if record.def_id else [record]
            out["lineage"] = [self.record_view(r) for r in chain]
        return out

    async def op_list(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        what = self.what("list")
        if gate is not None:
            require_scopes(gate, what)
        include_retired = self.retired_arg(args, what)
        name = opt_str(args, "name", max_len=128, what=what)
        records = await self.defs.list(tenant, self.kind, name=name, include_retired=include_retired)
        overridden = {r.name for r in records if r.active}
        statics = [self.static_record(tenant, n) for n in self.static_names() if name is None or n == name]
        if gate is not None:
            records = [r for r in records if gate.allows(self.gate_subject(r.name, r.body))]
            statics = [s for s in statics if gate.allows(self.gate_subject(s.name, s.body))]
        static_views = [{**self.record_view(s), "overridden": s.name in overridden, "active": s.name not in overridden}
                        for s in statics]
        return {"defs": [await self.view(tenant, r) for r in records], "count": len(records), "static": static_views}

    async def op_retire(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        what = self.what("retire")
        if gate is not None:
            require_scopes(gate, what)
        record = await self.resolve(tenant, args, static_ok=False)
        self.check_gate(gate, record.name, record.body, what)
        return await self.view(tenant, await self.retire(tenant, record))

    async def op_promote(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        what = self.what("promote")
        if gate is not None:
            require_scopes(gate, what)
        if not opt_str(args, "def_id", max_len=64, what=what):
            raise DefRefused(f"{what}: def_id is required")
        record = await self.resolve(tenant, args, static_ok=False)
        self.check_gate(gate, record.name, record.body, what)
        return await self.view(tenant, await self.promote(tenant, record))

    async def op_verify(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        """Compare a locally computed hash with what new runs (fires, deliveries) of `name` get."""
        what = self.what("verify")
        if gate is not None:
            require_scopes(gate, what)
        name = self.name_arg(args)
        local = opt_str(args, "content_sha256", max_len=128, what=what)
        if not local:
            raise DefRefused(f"{what}: content_sha256 (the local hash) is required")
        current = await self.current(tenant, name)
        self.check_gate(gate, name, current.body if current is not None else None, what)
        if current is None:
            return {"name": name, "matches": False, "deployed": False, "current_sha256": None,
                    "current_def_id": None, "version": None, "source": None}
        earlier = self.treadle_hash(current.body)
        return {"name": name, "matches": local in (current.content_sha256, earlier), "deployed": True,
                "current_sha256": current.content_sha256, "current_def_id": current.def_id or None,
                **({"treadle_sha256": earlier} if earlier else {}),
                "version": current.version,
                "source": "runtime" if current.def_id else "yaml"}

    # -- the lifecycle's steps (also used outside the ops, e.g. the yaml trigger sync) --------------

    async def store(
        self, tenant: str, name: str, body: dict[str, Any], *, parent_def_id: str | None, description: str,
        promote: bool, run_id: str | None = None,
    ) -> DefRecord:
        """Record `body` (already normalized) as the next version of `name`; with `promote` it
        becomes the active one."""
        record = await self.defs.create(
            tenant, self.kind, name, body, self.named_content_hash(name, body), parent_def_id=parent_def_id,
            description=description, promote=promote, created_by_run_id=run_id,
            treadle_sha256=self.treadle_hash(body),
        )
        if promote:
            await self.on_activate(tenant, record)
        return record

    async def promote(self, tenant: str, record: DefRecord) -> DefRecord:
        record = await self.defs.promote(tenant, self.kind, record.def_id)
        await self.on_activate(tenant, record)
        return record

    async def retire(self, tenant: str, record: DefRecord) -> DefRecord:
        was_active = record.active
        record = await self.defs.retire(tenant, self.kind, record.def_id)
        if was_active:
            await self.on_retire(tenant, record)
        return record

    async def current(self, tenant: str, name: str) -> DefRecord | None:
        """What a new run (fire, delivery) of `name` gets: the active version, else the yaml one."""
        record = await self.defs.get(tenant, self.kind, name=name)
        if record is None and self.static_body(name) is not None:
            record = self.static_record(tenant, name)
        return record

    async def active_names(self, tenant_id: str) -> list[str]:
        """The names new runs (fires, deliveries) can use: active versions and the yaml base."""
        records = await self.defs.list(tenant_id, self.kind)
        return sorted({r.name for r in records if r.active} | set(self.static_names()))

    async def resolve(self, tenant: str, args: Mapping[str, Any], *, static_ok: bool) -> DefRecord:
        """By def_id; or name + version; or name → its active version, else (`static_ok`) its
        treadle.yaml definition, else its newest version. NotFound otherwise."""
        def_id = opt_str(args, "def_id", max_len=64)
        version = args.get("version")
        if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
            raise DefRefused(f"{self.label}: version must be a positive integer")
        record: DefRecord | None
        if def_id:
            record = await self.defs.get(tenant, self.kind, def_id=def_id)
            wanted = f"def {def_id!r}"
        else:
            name = self.name_arg(args)
            wanted = f"{name!r}" + (f" version {version}" if version else "")
            record = await self.defs.get(tenant, self.kind, name=name, version=version)
            if record is None and version is None:
                if static_ok and self.static_body(name) is not None:
                    record = self.static_record(tenant, name)
                else:
                    newest = await self.defs.list(tenant, self.kind, name=name, include_retired=True, limit=1)
                    record = newest[0] if newest else None
        if record is None:
            raise NotFound(f"{self.label} {wanted} not found")
        return record

    async def record_static(self, tenant: str, static: DefRecord) -> DefRecord:
        """A treadle.yaml def as a recorded (unpromoted) version, reusing an identical one."""
        for r in await self.defs.list(tenant, self.kind, name=static.name, limit=_STATIC_REUSE_SCAN):
            if r.content_sha256 == static.content_sha256 and r.body == static.body:
                return r
        return await self.store(tenant, static.name, static.body, parent_def_id=None,
                                description=STATIC_DESCRIPTION, promote=False)

    def static_record(self, tenant: str, name: str) -> DefRecord:
        """treadle.yaml's `name` as a record without def_id or version."""
        body = self.static_body(name)
        if body is None:
            raise NotFound(f"{self.label} {name!r} is not declared in treadle.yaml")
        return DefRecord(def_id="", tenant_id=tenant, kind=self.kind, name=name, version=0,
                         content_sha256=self.named_content_hash(name, body), body=body, parent_def_id=None,
                         status="active", description=STATIC_DESCRIPTION, created_by_run_id=None,
                         created_at=datetime.fromtimestamp(0, UTC), retired_at=None, active=True,
                         treadle_sha256=self.treadle_hash(body))

    def record_view(self, record: DefRecord) -> dict[str, Any]:
        """The base answer for a def: its row, and `source` runtime | yaml."""
        if not record.def_id:
            return {"def_id": None, "kind": record.kind, "name": record.name, "version": None,
                    "content_sha256": record.content_sha256,
                    **({"treadle_sha256": record.treadle_sha256} if record.treadle_sha256 else {}),
                    "body": record.body, "parent_def_id": None,
                    "status": "active", "active": record.active, "description": record.description,
                    "source": "yaml"}
        return {**record.to_api(), "source": "runtime"}

    # -- argument checks ---------------------------------------------------------------------------

    def what(self, op: str) -> str:
        return f"{self.label}.{op}"

    def check_gate(self, gate: Gate | None, name: str, body: Mapping[str, Any] | None, what: str) -> None:
        """The gate's verdict on the def `name` with `body` (None: no def exists, and a kind whose
        subject lives in the body has nothing to check beyond default-deny)."""
        if gate is None:
            return
        subject = self.gate_subject(name, body)
        if body is None and subject is None:
            return
        gate.check(subject, what)

    def name_arg(self, args: Mapping[str, Any]) -> str:
        name = args.get("name")
        if not isinstance(name, str) or not is_identifier(name):
            raise DefRefused(f"{self.label}: name is required and must match [A-Za-z0-9_-]{{1,128}}")
        return name

    def overlay_arg(self, args: Mapping[str, Any], *, required: bool) -> dict[str, Any]:
        overlay = args.get("overlay")
        if overlay is None and not required:
            return {}
        if not isinstance(overlay, dict):
            raise DefRefused(f"{self.label}: overlay (the def's fields, an object) is required")
        return dict(overlay)

    def retired_arg(self, args: Mapping[str, Any], what: str) -> bool:
        """`include_retired` or loomcycle's `retired` (booleans; both given must agree)."""
        given = {k: opt_bool(args, k, False, what=what) for k in ("include_retired", "retired")
                 if args.get(k) is not None}
        if len(set(given.values())) > 1:
            raise DefRefused(f"{what}: include_retired and retired are the same switch and disagree")
        return any(given.values())
