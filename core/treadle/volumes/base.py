"""The Volume port: where a volume's files are kept.

A `VolumeStorage` holds many volumes, each under a *location* the runtime derives
(`paths.persistent_location` / `ephemeral_location`); inside one, files are addressed by clean
relative POSIX paths (`paths.clean_path`). An adapter must make `write` atomic (a reader sees
the old or the new content, never a mix) and must refuse anything that would leave the
location (the host adapter resolves symlinks; S3 has none).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from treadle.errors import ToolError


class VolumeError(ToolError):
    code = "volume_error"


class FileMissing(VolumeError):
    code = "file_not_found"


class TooLarge(VolumeError):
    code = "file_too_large"


@dataclass(frozen=True, slots=True)
class Entry:
    """A file in a volume: its path relative to the volume root, size and modification time."""

    path: str
    size: int
    mtime: float


@dataclass(frozen=True, slots=True)
class Listing:
    entries: list[Entry]
    #: the walk stopped at its limit: more files may match
    truncated: bool


class VolumeStorage(Protocol):
    #: "host" | "s3" (reported by Context op=self)
    kind: str
    #: whether a command may run with a volume as its working directory (Bash; host only)
    supports_exec: bool

    async def stat(self, location: str, path: str) -> Entry | None:
        """The file at `path`, or None when there is none (a directory is not a file)."""
        ...

    async def read(self, location: str, path: str, max_bytes: int) -> tuple[bytes, int]:
        """The first `max_bytes` of the file and its whole size (FileMissing when absent)."""
        ...

    async def write(self, location: str, path: str, data: bytes) -> None:
        """Create or replace the file atomically (parents are created)."""
        ...

    async def walk(self, location: str, prefix: str, limit: int) -> Listing:
        """Every file under `prefix` ("" = the whole volume), sorted by path, at most `limit`."""
        ...

    async def purge(self, location: str) -> int:
        """Delete the whole volume; returns how many files went."""
        ...

    def exec_dir(self, location: str) -> Path:
        """A local directory holding the volume, for Bash's working directory (created if need
        be). VolumeError where `supports_exec` is False."""
        ...
