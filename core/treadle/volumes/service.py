"""Which volume a file-tool call reaches, and the lifecycle of ephemeral volumes.

- An agent reaches exactly the volumes its `volumes:` bindings name: a treadle.yaml volume, else
  the tenant's active VolumeDef of that name. A binding's `mode` may narrow the volume's own.
- A sub-agent run reaches only what its parent granted it when the Agent tool started it (the
  parent's own effective volumes, written to `run_volume_grants` in the same transaction as the
  child run): a child's binding the parent lacks is dropped, and where both hold a volume the
  narrower mode wins. A child run without a grant row gets no volume (fail closed).
- A volume's location is derived here — `t/<tenant>/v/<name>` for a persistent volume,
  `t/<tenant>/e/<top-level run>/<name>` for an ephemeral one — never taken from a caller.
- An ephemeral instance is recorded (`volume_instances`) before its first file is written, so
  the purge at the end of the top-level run, or the sweeper's after a crash, finds it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError

from treadle.config import AgentConfig, TreadleConfig
from treadle.errors import ToolError
from treadle.specs.volumes import VolumeMode, VolumeSpec, narrower
from treadle.store.defs import DefStore
from treadle.store.subruns import SubRunStore
from treadle.store.volumes import Instance, VolumeStore
from treadle.volumes.base import VolumeStorage
from treadle.volumes.paths import ephemeral_location, persistent_location, tenant_segment

log = logging.getLogger("treadle.volumes")

#: the defs.kind of a runtime VolumeDef
VOLUME_KIND = "volume"


class VolumesUnavailable(ToolError):
    code = "volumes_unavailable"


class VolumeRefused(ToolError):
    code = "volume_refused"


@dataclass(frozen=True, slots=True)
class Bound:
    """One volume an agent's call may reach, with its effective mode."""

    name: str
    mode: VolumeMode
    ephemeral: bool
    default: bool
    source: Literal["yaml", "runtime"]
    description: str = ""
    #: the operator's host directory the volume is (a treadle.yaml volume's `path`), else None
    path: str | None = None


@dataclass(frozen=True, slots=True)
class OpenVolume:
    """A resolved volume: where its files live and how they may be touched."""

    bound: Bound
    location: str
    storage: VolumeStorage

    @property
    def name(self) -> str:
        return self.bound.name


class VolumeService:
    def __init__(
        self, storage: VolumeStorage | None, config: TreadleConfig, store: VolumeStore, defs: DefStore,
        subruns: SubRunStore,
    ) -> None:
        self.storage = storage
        self.config = config
        self.store = store
        self.defs = defs
        self.subruns = subruns
        self._locks: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def file_lock(self, location: str, path: str) -> AsyncIterator[None]:
        """One read-modify-write of a file at a time in this process: a turn's external calls run
        concurrently (and all in one process), so two Edits of one file in one turn must not
        both start from the same content."""
        key = (location, path)
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    # -- resolving ---------------------------------------------------------------------------------

    async def spec(self, tenant_id: str, name: str) -> tuple[VolumeSpec, Literal["yaml", "runtime"]] | None:
        static = self.config.volumes.get(name)
        if static is not None:
            return static, "yaml"
        record = await self.defs.get(tenant_id, VOLUME_KIND, name=name)
        if record is None:
            return None
        try:
            return VolumeSpec.model_validate(record.body), "runtime"
        except ValidationError:
            log.warning("VolumeDef %s of tenant %s has an invalid body", name, tenant_id)
            return None

    async def grants(self, tenant_id: str, run_id: str) -> dict[str, str] | None:
        """What the run was granted by its parent; None for a top-level run (not narrowed)."""
        granted = await self.store.grants(tenant_id, run_id)
        if granted is not None:
            return granted
        try:
            depth, _root = await self.subruns.lineage(tenant_id, run_id)
        except LookupError:
            return None  # a call outside any run (an operator's tool context)
        return {} if depth > 0 else None

    async def bindings(self, tenant_id: str, run_id: str, agent: AgentConfig) -> list[Bound]:
        """The volumes this run's agent reaches (unknown names and ungranted volumes left out)."""
        granted = await self.grants(tenant_id, run_id) if agent.volumes else None
        out: list[Bound] = []
        for b in agent.volumes:
            found = await self.spec(tenant_id, b.name)
            if found is None:
                continue
            spec, source = found
            mode: VolumeMode = narrower(spec.mode, b.mode or spec.mode)
            if granted is not None:
                parent_mode = granted.get(b.name)
                if parent_mode not in ("ro", "rw"):
                    continue
                mode = narrower(mode, "ro" if parent_mode == "ro" else "rw")
            out.append(Bound(b.name, mode, spec.ephemeral, b.default or spec.default, source, spec.description,
                             getattr(spec, "path", None)))
        return out

    async def open(
        self, tenant_id: str, run_id: str, agent: AgentConfig, volume: object, *, write: bool
    ) -> OpenVolume:
        """The volume a call names (or the default one); ToolError with the reason otherwise."""
        if self.storage is None:
            raise VolumesUnavailable("no volume storage is configured in this runtime (volumes are unavailable)")
        if volume is not None and not isinstance(volume, str):
            raise VolumeRefused("volume must be a string (a volume name)")
        bound = await self.bindings(tenant_id, run_id, agent)
        names = ", ".join(b.name for b in bound) or "none"
        if not bound:
            raise VolumeRefused("you are bound to no volume: you have no file access (Context op=self)")
        if volume:
            chosen = next((b for b in bound if b.name == volume), None)
            if chosen is None:
                raise VolumeRefused(f"volume {volume!r} is not one of yours (yours: {names})")
        else:
            defaults = [b for b in bound if b.default]
            if len(defaults) == 1:
                chosen = defaults[0]
            elif len(bound) == 1:
                chosen = bound[0]
            else:
                raise VolumeRefused(f"name a volume: you have several and no single default ({names})")
        if write and chosen.mode != "rw":
            raise VolumeRefused(f"volume {chosen.name!r} is read-only for you; writes are refused")
        root = self._dynamic_root() if chosen.source == "runtime" else None
        if (chosen.path is not None or root is not None) and getattr(self.storage, "kind", "") != "host":
            raise VolumeRefused(f"volume {chosen.name!r} maps a host directory, and this runtime keeps its volumes "
                                f"in {getattr(self.storage, 'kind', 'another store')} (operator: drop its path)")
        if chosen.path is not None:
            return OpenVolume(chosen, chosen.path, self.storage)  # the host adapter reads an absolute location as is
        if chosen.ephemeral:
            try:
                _depth, run_root = await self.subruns.lineage(tenant_id, run_id)
            except LookupError:
                raise VolumeRefused(f"volume {chosen.name!r} is ephemeral: it exists only inside a run") from None
            location = ephemeral_location(tenant_id, run_root, chosen.name)
            if root is not None:
                location = f"{root}/{location}"
            await self.store.record_instance(Instance(tenant_id, run_root, chosen.name, location))
        else:
            location = persistent_location(tenant_id, chosen.name)
            if root is not None:
                location = f"{root}/{location}"
        return OpenVolume(chosen, location, self.storage)

    def tenant_location(self, tenant_id: str, name: str) -> str:
        """Where a treadle.yaml persistent volume keeps a tenant's files outside any run (retention's
        archive, erasure): `t/<tenant>/v/<name>`, or — a volume that is an operator's directory
        (`path`, shared by every tenant) — `<path>/t/<tenant>`."""
        spec = self.config.volumes.get(name)
        path = getattr(spec, "path", None)
        if path:
            return f"{path}/t/{tenant_segment(tenant_id)}"
        return persistent_location(tenant_id, name)

    def _dynamic_root(self) -> str | None:
        """The `path` of the treadle.yaml volume marked `dynamic_root` (runtime VolumeDefs live there)."""
        return next((v.path for v in self.config.volumes.values() if v.dynamic_root and v.path), None)

    # -- sub-agents ----------------------------------------------------------------------------------

    async def grant_child(self, tenant_id: str, parent_run_id: str, parent: AgentConfig, child_run_id: str) -> None:
        """Grant a child run the parent's effective volumes (its ceiling)."""
        grants: dict[str, str] = {b.name: b.mode for b in await self.bindings(tenant_id, parent_run_id, parent)}
        await self.store.grant(tenant_id, child_run_id, grants)

    # -- ephemeral purge -----------------------------------------------------------------------------

    async def run_ended(self, run_id: str) -> int:
        """After a run's last commit: drop its effect journal, and purge its ephemeral volumes when
        it is a top-level run; returns the files deleted."""
        instances = await self.store.ended(run_id)
        if not instances or not await self.store.run_ended(run_id):
            return 0
        return await self._purge(instances)

    async def purge_ended(self, limit: int = 100) -> int:
        """The sweeper's pass: purge instances whose top-level run ended, and the effect journals
        of ended runs (a crash skipped `run_ended`); returns the files deleted."""
        await self.store.forget_ended_effects()
        return await self._purge(await self.store.ended_instances(limit))

    async def _purge(self, instances: list[Instance]) -> int:
        if self.storage is None:
            return 0
        deleted = 0
        for inst in instances:
            try:
                deleted += await self.storage.purge(inst.location)
            except Exception as exc:  # left for the next sweep
                log.warning("purging ephemeral volume %s of run %s failed: %s", inst.name, inst.root_run_id, exc)
                continue
            await self.store.forget_instance(inst)
        return deleted
