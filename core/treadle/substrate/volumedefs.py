"""VolumeDef: runtime volumes on the shared def lifecycle (create, fork, get, list, retire,
promote, verify) plus loomcycle's `delete` and `purge`.

A body is `{mode: ro|rw, ephemeral: bool}` — a name and a mode, never a path: where the files
live is derived by the runtime (`volumes/paths.py`). treadle.yaml's `volumes:` are the static
base (a VolumeDef cannot be created over one). `create` also takes loomcycle's flat shape
(`{op: create, name, mode, ephemeral}`) when no `overlay` is given.

- `delete {name}`: retire the active version; the files stay (a new create of the name finds them).
- `purge {name}`: retire it and delete its files — a persistent volume's whole tree; for an
  ephemeral one, the calling run's instance (ephemeral instances also go when their top-level
  run ends). A yaml volume is purged of its files but stays declared.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from treadle.defs.args import parse_spec
from treadle.defs.gates import Gate, require_scopes
from treadle.defs.lifecycle import DefLifecycle
from treadle.domain.defs import content_sha256
from treadle.errors import DefRefused, ToolError
from treadle.specs.volumes import VolumeSpec
from treadle.store.defs import DefStore
from treadle.volumes.paths import persistent_location
from treadle.volumes.service import VOLUME_KIND, VolumeService

FLAT_FIELDS = ("mode", "ephemeral")
#: names a created volume in the tenant's Path tree: (tenant, volume, mode, mount_at) → the path
Mounter = Callable[[str, str, str, Any], Awaitable[str]]


def volume_body(spec: VolumeSpec) -> dict[str, Any]:
    return {"mode": spec.mode, "ephemeral": spec.ephemeral}


class VolumeDefFamily(DefLifecycle):
    kind = VOLUME_KIND
    label = "VolumeDef"
    create_promotes = True
    fork_promotes = True
    extra_ops = ("delete", "purge")

    def __init__(self, defs: DefStore, volumes: VolumeService, mount: Mounter | None = None) -> None:
        super().__init__(defs)
        self.volumes = volumes
        self.mount = mount

    async def dispatch(
        self, tenant_id: str, args: Any, *, gate: Gate | None = None, run_id: str | None = None
    ) -> dict[str, Any]:
        """loomcycle's `mount_at` (create only): the created volume is named in the tenant's Path
        tree at it (default /vol/<name>); an ephemeral volume has no name there."""
        mount_at = None
        if isinstance(args, dict):
            if "mount_at" in args and (args.get("op") != "create" or self.mount is None):
                raise DefRefused(f"{self.what(str(args.get('op')))}: mount_at applies to create only"
                                 if self.mount is not None else "VolumeDef: mount_at: no Path tree in this runtime")
            args = dict(args)
            mount_at = args.pop("mount_at", None)
        if isinstance(args, dict) and args.get("op") == "create" and "overlay" not in args:
            args = {**{k: v for k, v in args.items() if k not in FLAT_FIELDS},
                    "overlay": {k: args[k] for k in FLAT_FIELDS if k in args}}
        result = await super().dispatch(tenant_id, args, gate=gate, run_id=run_id)
        if self.mount is not None and isinstance(args, dict) and args.get("op") == "create":
            body = (result.get("body") or {}) if isinstance(result.get("body"), dict) else {}
            if body.get("ephemeral"):
                if mount_at is not None:
                    raise DefRefused("VolumeDef.create: mount_at: an ephemeral volume is not named in the Path tree")
            else:
                name = str(result.get("name") or args.get("name"))
                try:  # loomcycle's: the volume stands; a name that could not be given is a warning
                    result["mount_at"] = await self.mount(tenant_id, name, str(body.get("mode", "rw")),
                                                          mount_at or f"/vol/{name}")
                except ToolError as exc:
                    result["mount_warning"] = f"volume created but mount registration failed: {exc.message}"
        return result

    async def normalize(self, tenant: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        for key in ("default", "description"):
            if key in body:
                raise DefRefused(f"invalid VolumeDef: {key}: only treadle.yaml volumes have it"
                                 + (" (give the op's description instead)" if key == "description" else ""))
        return volume_body(parse_spec(self.label, VolumeSpec, body))

    def content_hash(self, body: dict[str, Any]) -> str:
        return content_sha256({"mode": body.get("mode"), "ephemeral": bool(body.get("ephemeral"))})

    def static_names(self) -> list[str]:
        return sorted(self.volumes.config.volumes)

    def static_body(self, name: str) -> dict[str, Any] | None:
        spec = self.volumes.config.volumes.get(name)
        return volume_body(spec) if spec is not None else None

    async def op_delete(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        what = self.what("delete")
        if gate is not None:
            require_scopes(gate, what)
        name = self.name_arg(args)
        self.check_gate(gate, name, None, what)
        if self.static_body(name) is not None:
            raise DefRefused(f"{what}: {name!r} is declared in treadle.yaml")
        active = await self.defs.get(tenant, self.kind, name=name)
        if active is None:
            return {"name": name, "deleted": False, "reason": "no active VolumeDef of that name"}
        await self.retire(tenant, active)
        return {"name": name, "deleted": True, "def_id": active.def_id, "files": "kept"}

    async def op_purge(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        what = self.what("purge")
        if gate is not None:
            require_scopes(gate, what)
        name = self.name_arg(args)
        self.check_gate(gate, name, None, what)
        storage = self.volumes.storage
        if storage is None:
            raise DefRefused(f"{what}: no volume storage is configured in this runtime")
        found = await self.volumes.spec(tenant, name)
        retired = False
        if self.static_body(name) is None:
            active = await self.defs.get(tenant, self.kind, name=name)
            if active is not None:
                await self.retire(tenant, active)
                retired = True
        deleted = 0
        if found is not None and found[0].ephemeral:
            if run_id is not None:
                _depth, root = await self.volumes.subruns.lineage(tenant, run_id)
                for inst in await self.volumes.store.instances(root):
                    if inst.name == name and inst.tenant_id == tenant:
                        deleted += await storage.purge(inst.location)
                        await self.volumes.store.forget_instance(inst)
        else:
            deleted = await storage.purge(persistent_location(tenant, name))
        return {"name": name, "purged": True, "retired": retired, "files_deleted": deleted}
