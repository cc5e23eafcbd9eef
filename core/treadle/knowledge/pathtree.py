"""The Path tree (loomcycle's RFC AL): Unix-like names over Documents, Memory entries and volumes.

A dirent maps a path in one scope's tree (store/dirents.py `Tree`) to a resource — a name, not a
grant: resolving `/docs/launch` says which document it is, reading it still goes through the
Document tool's checks. Directories are implicit (a leaf at /a/b/c implies /a and /a/b); `mkdir`
materializes an empty one. Ops (loomcycle's six): resolve, ls, stat, mkdir, mv, rm.

Path grammar (loomcycle's `normalizePath`): absolute, segments of [A-Za-z0-9._-] (at most 64
characters each), `.` and `..` refused (never resolved — a path cannot climb out of its tree),
empty segments collapsed, at most 64 segments and 1024 characters.

Errors are ToolErrors whose code says what failed: `invalid_path`, `no_such_path`,
`path_exists`, `path_not_empty`, `not_a_directory`, `resource_too_unsupported`, `invalid_input`.
"""

from __future__ import annotations

import re
from typing import Any

from treadle.errors import ToolError
from treadle.store.dirents import Dirent, DirentStore, Tree

MAX_PATH_LEN = 1024
MAX_SEGMENTS = 64
MAX_SEGMENT_LEN = 64
KINDS = ("directory", "document", "volume_mount", "memory_entry")
OPS = ("resolve", "ls", "stat", "mkdir", "mv", "rm")
_SEGMENT = re.compile(r"^[A-Za-z0-9._-]+$")


def _refuse(message: str, code: str) -> ToolError:
    return ToolError(f"Path: {code}: {message}", code=code)


def normalize(raw: Any) -> str:
    """The canonical form of `raw` ("/" or "/a/b", no trailing slash), or `invalid_path`."""
    if raw is None or raw == "":
        return "/"
    if not isinstance(raw, str):
        raise _refuse("a path is a string", "invalid_path")
    if len(raw) > MAX_PATH_LEN:
        raise _refuse(f"path too long ({len(raw)} characters, at most {MAX_PATH_LEN})", "invalid_path")
    if not raw.startswith("/"):
        raise _refuse(f"path must be absolute (start with '/'): {raw!r}", "invalid_path")
    segments = [s for s in raw.split("/") if s]
    for s in segments:
        if s in (".", ".."):
            raise _refuse(f"path may not contain {s!r} segments: {raw!r}", "invalid_path")
        if len(s) > MAX_SEGMENT_LEN:
            raise _refuse(f"path segment {s!r} is longer than {MAX_SEGMENT_LEN} characters", "invalid_path")
        if not _SEGMENT.match(s):
            raise _refuse(f"invalid path segment {s!r} (allowed: letters, digits, . _ -): {raw!r}", "invalid_path")
    if len(segments) > MAX_SEGMENTS:
        raise _refuse(f"too many path segments ({len(segments)}, at most {MAX_SEGMENTS})", "invalid_path")
    return "/" + "/".join(segments)


def split(canonical: str) -> tuple[str, str]:
    """("/docs/", "x") for "/docs/x"; ("", "") for the root."""
    if canonical == "/":
        return "", ""
    i = canonical.rindex("/")
    return canonical[: i + 1], canonical[i + 1 :]


def children_prefix(canonical: str) -> str:
    """The parent_path of a directory's children: "/" for the root, "/docs/" for /docs."""
    return "/" if canonical == "/" else canonical + "/"


def leaf(raw: Any) -> tuple[str, str, str]:
    """(canonical, parent, name) of a path that must not be the root."""
    canonical = normalize(raw)
    if canonical == "/":
        raise _refuse("the root path is not a name (it always exists)", "invalid_path")
    parent, name = split(canonical)
    return canonical, parent, name


def entry(d: Dirent) -> dict[str, Any]:
    out: dict[str, Any] = {"name": d.name, "kind": d.kind, "full_path": d.full_path}
    if d.resource_ref:
        out["resource_ref"] = d.resource_ref
    return out


class PathTree:
    """The six ops over one store; every call names its tree (the caller resolved it from the run
    or the principal, never from the input)."""

    def __init__(self, dirents: DirentStore) -> None:
        self.dirents = dirents

    async def name(self, tree: Tree, raw_path: Any, kind: str, ref: dict[str, Any]) -> str:
        """Name a resource at `raw_path` (create or repoint the dirent); the canonical path. A
        directory — materialized or implied by descendants — is never overwritten."""
        canonical, parent, name = leaf(raw_path)
        existing = await self.dirents.get(tree, parent, name)
        if (existing is not None and existing.kind == "directory") or (
            existing is None and await self.dirents.under(tree, children_prefix(canonical))
        ):
            raise _refuse(f"{canonical} is a directory", "path_exists")
        await self.dirents.put(tree, parent, name, kind, ref)
        return canonical

    async def lookup(self, tree: Tree, raw_path: Any, kind: str) -> Dirent:
        """The dirent at `raw_path`, which must name a resource of `kind`."""
        canonical, parent, name = leaf(raw_path)
        found = await self.dirents.get(tree, parent, name)
        if found is None:
            raise _refuse(f"no such path: {canonical}", "no_such_path")
        if found.kind != kind:
            raise _refuse(f"path {canonical} is a {found.kind}, not a {kind}", "invalid_input")
        return found

    async def resolve(self, tree: Tree, args: dict[str, Any]) -> dict[str, Any]:
        canonical = normalize(args.get("path"))
        if canonical == "/":
            return {"kind": "directory", "full_path": "/"}
        d = await self._existing(tree, canonical)
        return entry(d) if d is not None else _implied(canonical)

    async def stat(self, tree: Tree, args: dict[str, Any]) -> dict[str, Any]:
        canonical = normalize(args.get("path"))
        if canonical == "/":
            return {"kind": "directory", "full_path": "/", "scope": tree.scope}
        d = await self._existing(tree, canonical)
        if d is None:
            return {**_implied(canonical), "scope": tree.scope}
        return {
            "full_path": canonical,
            "name": d.name,
            "kind": d.kind,
            "scope": tree.scope,
            "resource_ref": d.resource_ref,
            "created_at": d.created_at.isoformat(),
            "updated_at": d.updated_at.isoformat(),
        }

    async def ls(self, tree: Tree, args: dict[str, Any]) -> dict[str, Any]:
        canonical = normalize(args.get("path"))
        prefix, kind = children_prefix(canonical), args.get("kind_filter") or ""
        if kind and kind not in KINDS:
            raise _refuse(f"kind_filter must be one of {', '.join(KINDS)}", "invalid_input")
        rows = await self.dirents.under(tree, prefix)
        if args.get("recursive"):
            return {"path": canonical, "entries": [entry(d) for d in rows if not kind or d.kind == kind]}
        explicit: dict[str, Dirent] = {}
        implied: set[str] = set()
        for d in rows:
            if d.parent_path == prefix:
                explicit[d.name] = d
            else:  # a deeper descendant: its first segment below prefix is a child directory
                implied.add(d.parent_path[len(prefix) :].split("/", 1)[0])
        entries = [entry(d) for d in explicit.values() if not kind or d.kind == kind]
        if kind in ("", "directory"):
            entries += [{"name": n, "kind": "directory", "full_path": prefix + n} for n in implied if n not in explicit]
        return {"path": canonical, "entries": sorted(entries, key=lambda e: e["name"])}

    async def mkdir(self, tree: Tree, args: dict[str, Any]) -> dict[str, Any]:
        canonical, parent, name = leaf(args.get("path"))
        found = await self.dirents.get(tree, parent, name)
        if found is not None:
            if found.kind == "directory":
                return {"ok": True, "path": canonical, "created": False, "note": "already a directory"}
            raise _refuse(f"path exists and is not a directory: {canonical} (kind={found.kind})", "path_exists")
        if await self.dirents.under(tree, children_prefix(canonical)):
            return {"ok": True, "path": canonical, "created": False, "note": "directory already implied by descendants"}
        await self.dirents.put(tree, parent, name, "directory", {})
        return {"ok": True, "path": canonical, "created": True}

    async def mv(self, tree: Tree, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("to"):
            raise _refuse("mv needs to (the destination path)", "invalid_input")
        src, src_parent, src_name = leaf(args.get("path"))
        dst, dst_parent, dst_name = leaf(args.get("to"))
        if src == dst:
            raise _refuse("source and destination are the same path", "invalid_input")
        if (dst + "/").startswith(src + "/"):
            raise _refuse(f"cannot move a path into itself or its own subtree: {src} -> {dst}", "invalid_path")
        if await self.dirents.get(tree, dst_parent, dst_name) is not None or await self.dirents.under(
            tree, children_prefix(dst)
        ):
            raise _refuse(f"destination already exists: {dst}", "path_exists")
        if not await self.dirents.move(tree, (src_parent, src_name), (dst_parent, dst_name)):
            raise _refuse(f"no such path: {src}", "no_such_path")
        return {"ok": True, "from": src, "to": dst}

    async def rm(self, tree: Tree, args: dict[str, Any]) -> dict[str, Any]:
        canonical, parent, name = leaf(args.get("path"))
        if args.get("resource_too"):
            raise _refuse(
                "resource_too is not supported: rm removes the name only; delete the resource with its"
                " own tool (Memory, VolumeDef, Document)",
                "resource_too_unsupported",
            )
        prefix = children_prefix(canonical)
        below = await self.dirents.under(tree, prefix)
        if below and not args.get("recursive"):
            raise _refuse(
                f"path {canonical!r} has {len(below)} descendant(s); pass recursive:true to remove them",
                "path_not_empty",
            )
        removed = await self.dirents.delete_under(tree, prefix) if below else 0
        removed += int(await self.dirents.delete(tree, parent, name))
        if not removed:
            raise _refuse(f"no such path: {canonical}", "no_such_path")
        return {"ok": True, "removed": canonical, "n_removed": removed}

    async def dispatch(self, tree: Tree, args: dict[str, Any]) -> dict[str, Any]:
        op = args.get("op")
        if op not in OPS:
            raise _refuse(
                f"op must be one of {', '.join(OPS)}" if op else "missing required field: op", "invalid_input"
            )
        result: dict[str, Any] = await getattr(self, str(op))(tree, args)
        return result

    async def _existing(self, tree: Tree, canonical: str) -> Dirent | None:
        """The dirent at `canonical`; None for a directory only its descendants imply."""
        parent, name = split(canonical)
        found = await self.dirents.get(tree, parent, name)
        if found is None and not await self.dirents.under(tree, children_prefix(canonical)):
            raise _refuse(f"no such path: {canonical}", "no_such_path")
        return found


def _implied(canonical: str) -> dict[str, Any]:
    return {"name": split(canonical)[1], "kind": "directory", "full_path": canonical, "implied": True}
