"""Relative paths inside a volume, and the storage locations the runtime derives.

A caller gives a path relative to the volume root (`src/main.py`, `./notes.md`); it is
normalised to a POSIX relative path. Refused: absolute paths, `~`, `..` that climbs out of the
root, NUL, backslashes, and paths longer than 4096 characters. A location (`t/<tenant>/v/<name>`
or `t/<tenant>/e/<root run>/<name>`) is never supplied by anyone: the runtime derives it.
"""

from __future__ import annotations

import hashlib
import posixpath

from treadle.domain.ids import is_identifier
from treadle.errors import ToolError

MAX_PATH = 4096


class PathRefused(ToolError):
    code = "path_refused"


def clean_path(path: object, *, allow_root: bool = False, what: str = "path") -> str:
    """`path` as a normalised relative POSIX path ("" is the root, when `allow_root`)."""
    if not isinstance(path, str):
        raise PathRefused(f"{what} must be a string")
    if len(path) > MAX_PATH:
        raise PathRefused(f"{what} is longer than {MAX_PATH} characters")
    if "\x00" in path or "\\" in path:
        raise PathRefused(f"{what} {path!r}: NUL and backslashes are not allowed")
    if path.startswith(("/", "~")):
        raise PathRefused(f"{what} {path!r}: give a path relative to the volume root (no leading / or ~)")
    norm = posixpath.normpath(path) if path else "."
    if norm == ".." or norm.startswith("../"):
        raise PathRefused(f"{what} {path!r} leaves the volume")
    if norm == ".":
        if not allow_root:
            raise PathRefused(f"{what} is required (a file path relative to the volume root)")
        return ""
    return norm


def tenant_segment(tenant_id: str) -> str:
    """A tenant id as one path segment: itself when it is an identifier, else `~` + a hash
    (`~` never occurs in an identifier, so the two forms cannot collide)."""
    if is_identifier(tenant_id):
        return tenant_id
    return "~" + hashlib.sha256(tenant_id.encode()).hexdigest()[:40]


def persistent_location(tenant_id: str, name: str) -> str:
    return f"t/{tenant_segment(tenant_id)}/v/{name}"


def ephemeral_location(tenant_id: str, root_run_id: str, name: str) -> str:
    return f"t/{tenant_segment(tenant_id)}/e/{root_run_id}/{name}"


def join(base: str, path: str) -> str:
    return f"{base}/{path}" if base and path else (base or path)
