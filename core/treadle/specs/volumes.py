"""Volumes and the workspace tools in treadle.yaml (pure specs, no I/O).

```yaml
volumes:                     # named workspaces; every tenant gets its own copy of each
  work: {mode: rw, default: true}
  scratch: {mode: rw, ephemeral: true}   # one per top-level run, purged when it ends
  refs: {mode: ro}
workspace:                   # caps of the file tools, and the restricted Bash (off by default)
  bash: {enabled: false, timeout_seconds: 30}
agents:
  coder:
    tools: [Read, Write, Edit, Grep, Glob]
    volumes: [work, {name: refs}, {name: scratch, mode: ro}]   # a binding may narrow rw to ro
```

Where a volume lives is derived by the runtime (tenant, name, and the top-level run for an
ephemeral one); a caller never names a host path or a bucket key. The operator may (loomcycle's
static volumes, treadle.yaml only, the sidecar's host storage only):

```yaml
volumes:
  repo: {path: /srv/checkout, mode: rw, default: true}   # an existing directory, shared by every tenant
  dyn: {path: /srv/volumes, dynamic_root: true}          # runtime VolumeDefs live under it
```
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from treadle.domain.ids import Identifier

VolumeMode = Literal["ro", "rw"]


def narrower(a: VolumeMode, b: VolumeMode) -> VolumeMode:
    """The more restrictive of two modes."""
    return "ro" if "ro" in (a, b) else "rw"


class VolumeSpec(BaseModel):
    """One `volumes:` entry (also the body of a runtime VolumeDef)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    mode: VolumeMode = "rw"
    #: one instance per top-level run (shared by its sub-agents), purged when that run ends
    ephemeral: bool = False
    #: the volume a tool call uses when it names none (at most one yaml volume)
    default: bool = False
    description: str = Field(default="", max_length=1024)


class StaticVolumeSpec(VolumeSpec):
    """A treadle.yaml `volumes:` entry: a VolumeSpec, plus loomcycle's operator-only fields (a
    runtime VolumeDef refuses them by name: a tenant never names a host directory)."""

    #: an existing host directory (resolved to an absolute path at load): the volume is that
    #: directory, the same for every tenant — bind it only to agents that may all see it
    path: str | None = Field(default=None, min_length=1, max_length=4096)
    #: runtime VolumeDefs are placed under this volume's `path` (`<path>/t/<tenant>/v/<name>`)
    #: instead of treadle's own volume directory; at most one volume, and it needs a `path`
    dynamic_root: bool = False

    @model_validator(mode="after")
    def _host_directory(self) -> StaticVolumeSpec:
        import os

        if self.path is None:
            if self.dynamic_root:
                raise ValueError("dynamic_root needs a path (the directory VolumeDefs are placed under)")
            return self
        if self.ephemeral:
            raise ValueError("a volume with a path is the operator's directory: it cannot be ephemeral")
        resolved = os.path.abspath(os.path.expanduser(self.path))
        if not os.path.isdir(resolved):
            raise ValueError(f"path {resolved!r} must be an existing directory (treadle never creates it)")
        self.path = resolved
        return self


class VolumeBinding(BaseModel):
    """An agent's binding of a volume by name; `mode` may narrow the volume's own mode."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    name: Identifier
    mode: VolumeMode | None = None
    default: bool = False

    @model_validator(mode="before")
    @classmethod
    def _name_form(cls, v: Any) -> Any:
        return {"name": v} if isinstance(v, str) else v


def binding_grants(bindings: list[VolumeBinding] | list[dict[str, Any]]) -> list[str]:
    """Bindings as comparable grants, `name:mode` (rw implies ro; a binding without a mode counts
    as rw, the widest it can be): a def may carry only the grants its author holds."""
    out: list[str] = []
    for b in bindings:
        binding = b if isinstance(b, VolumeBinding) else VolumeBinding.model_validate(b)
        out.append(f"{binding.name}:ro")
        if binding.mode != "ro":
            out.append(f"{binding.name}:rw")
    return out


class BashConfig(BaseModel):
    """The restricted Bash tool (sidecar only). It is NOT a sandbox: see docs/workspace.md."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    enabled: bool = False
    timeout_seconds: float = Field(default=30.0, gt=0, le=300)
    max_timeout_seconds: float = Field(default=300.0, gt=0, le=3600)
    max_output_bytes: int = Field(default=1 << 20, ge=1024, le=64 << 20)
    #: environment variables passed through to the command besides PATH (names only)
    env_passthrough: list[Identifier] = Field(default=[], max_length=64)


class WorkspaceConfig(BaseModel):
    """`workspace:` — the file tools' caps (loomcycle's defaults) and Bash."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    read_max_bytes: int = Field(default=256 * 1024, ge=1024, le=64 << 20)
    write_max_bytes: int = Field(default=1 << 20, ge=1024, le=64 << 20)
    notebook_max_bytes: int = Field(default=8 << 20, ge=1024, le=64 << 20)
    #: Grep/Glob: the most files one call looks at, and the most bytes Grep reads in all
    scan_max_files: int = Field(default=10_000, ge=1, le=1_000_000)
    scan_max_bytes: int = Field(default=64 << 20, ge=1024, le=4 << 30)
    grep_max_output_bytes: int = Field(default=256 * 1024, ge=1024, le=16 << 20)
    bash: BashConfig = Field(default_factory=BashConfig)
