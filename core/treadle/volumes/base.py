"""The Volume port: where a volume's files are kept.

A `VolumeStorage` holds many volumes, each under a *location* the runtime derives
(`paths.persistent_location` / `ephemeral_location`); inside one, files are addressed by clean
relative POSIX paths (`paths.clean_path`). An adapter must make `write` atomic (a reader sees
the old or the new content, never a mix) and must refuse anything that would leave the
location (the host adapter resolves symlinks; S3 has none).

Conditional writes fence a stale writer: `stat` gives the file's `tag` (it changes with every
write), and `write(..., if_match=tag)` (or `if_absent=True` for a file `stat` did not find)
replaces the file only if it is still that version — checked and written as one step by the
adapter (S3: If-Match / If-None-Match; host: under an exclusive lock of the directory) —
else `FileChanged`. The file tools write so (builtins/files/common.py): a worker stalled past its
lease cannot land a write over what another worker did since it looked.
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


class FileChanged(VolumeError):
    """A conditional write found the file changed since its `stat` (another writer came first)."""

    code = "file_changed"


@dataclass(frozen=True, slots=True)
class Entry:
    """A file in a volume: its path relative to the volume root, size and modification time."""

    path: str
    size: int
    mtime: float
    #: the file's version, changed by every write (S3: its ETag); for `write(if_match=)`
    tag: str | None = None


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

    async def write(
        self, location: str, path: str, data: bytes, *, if_match: str | None = None, if_absent: bool = False
    ) -> None:
        """Create or replace the file atomically (parents are created). With `if_match` only if
        the file is still the version `stat` tagged so, with `if_absent` only if there is none:
        else FileChanged."""
        ...

    async def walk(self, location: str, prefix: str, limit: int) -> Listing:
        """Every file under `prefix` ("" = the whole volume), sorted by path, at most `limit`."""
        ...

    async def purge(self, location: str) -> int:
        """Delete the whole volume; returns how many files went."""
        ...

    async def delete(self, location: str, path: str) -> bool:
        """Delete one file; False when there was none (retention's archive, a subject's erasure)."""
        ...

    def exec_dir(self, location: str) -> Path:
        """A local directory holding the volume, for Bash's working directory (created if need
        be). VolumeError where `supports_exec` is False."""
        ...
