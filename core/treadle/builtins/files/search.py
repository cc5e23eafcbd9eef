"""Grep and Glob (loomcycle's shapes). Both walk the volume through the port — a directory walk
on the host, a bounded listing of the prefix on S3 — looking at no more than
`workspace.scan_max_files` files; Grep reads no more than `workspace.scan_max_bytes` in all
(ranged reads on S3) and matches with the `regex` module under a time limit, so a pattern that
backtracks without end is stopped, not left spinning. Paths come back relative to the volume
root (what Read, Write and Edit take)."""

from __future__ import annotations

import asyncio
import fnmatch
import time
from dataclasses import dataclass, field
from typing import Any

from treadle.builtins.files.common import VOLUME_HELP, open_volume, opt_bool, opt_int, req_str, workspace
from treadle.errors import ToolError
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult
from treadle.volumes.paths import clean_path, join

GREP_MODES = ("files_with_matches", "content", "count")
DEFAULT_HEAD_LIMIT = 100
GLOB_MAX_RESULTS = 100
#: the time one Grep call may spend matching, in all
GREP_MATCH_SECONDS = 10.0
#: a single file larger than this is skipped by Grep
GREP_MAX_FILE_BYTES = 8 << 20
#: files Grep reads at once (S3: concurrent ranged GETs)
GREP_READ_BATCH = 16


def _subpath(args: dict[str, Any]) -> str:
    raw = args.get("path")
    return "" if raw is None else clean_path(raw, allow_root=True)


def _glob_ok(pattern: str) -> None:
    if pattern.count("[") != pattern.count("]"):
        raise ToolError(f"invalid glob pattern {pattern!r}: unbalanced brackets")


@dataclass
class _FileHits:
    path: str
    lines: list[tuple[int, str, list[tuple[int, str]], list[tuple[int, str]]]] = field(default_factory=list)


class GrepTool:
    name = "Grep"
    effects: ToolEffects = "external"
    description = ("Search file contents in one of your volumes with a regular expression. Returns matching file "
                   "paths, matching lines with optional context, or per-file counts. Binary files are skipped.")
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression matched against each file's contents."},
            "path": {"type": "string", "description": "Optional subpath under the volume root. Defaults to the root."},
            "volume": {"type": "string", "description": VOLUME_HELP},
            "glob": {"type": "string", "description": "Optional single-segment filename pattern (e.g. *.py)."},
            "output_mode": {"type": "string", "enum": list(GREP_MODES),
                            "description": "files_with_matches (default) returns paths; content returns "
                            "file:line:text with optional -A/-B/-C context; count returns file:N."},
            "case_insensitive": {"type": "boolean"},
            "multiline": {"type": "boolean", "description": "Let . match newlines and a match span lines."},
            "head_limit": {"type": "integer", "description": f"Maximum results. Default {DEFAULT_HEAD_LIMIT}."},
            "-A": {"type": "integer", "description": "Lines after each match (content mode)."},
            "-B": {"type": "integer", "description": "Lines before each match (content mode)."},
            "-C": {"type": "integer", "description": "Lines before and after each match; overrides -A/-B."},
        },
        "required": ["pattern"],
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        pattern = req_str(args, "pattern", self.name)
        mode = args.get("output_mode") or "files_with_matches"
        if mode not in GREP_MODES:
            raise ToolError(f"Grep: unknown output_mode {mode!r} (want {'|'.join(GREP_MODES)})")
        glob = args.get("glob")
        if glob is not None and (not isinstance(glob, str) or "/" in glob):
            raise ToolError("Grep: glob must be a single-segment filename pattern (e.g. *.py)")
        if glob:
            _glob_ok(glob)
        multiline = opt_bool(args, "multiline", self.name)
        import regex  # ~10 ms: a cold start imports it only for a Grep

        flags = regex.V0 | (regex.IGNORECASE if opt_bool(args, "case_insensitive", self.name) else 0)
        if multiline:
            flags |= regex.DOTALL | regex.MULTILINE
        try:
            rx = regex.compile(pattern, flags)
        except regex.error as exc:
            raise ToolError(f"Grep: invalid regex: {exc}") from None
        head = opt_int(args, "head_limit", self.name, default=DEFAULT_HEAD_LIMIT, lo=1) or DEFAULT_HEAD_LIMIT
        ctx_c = opt_int(args, "-C", self.name, default=None)
        before = ctx_c if ctx_c is not None else opt_int(args, "-B", self.name, default=0) or 0
        after = ctx_c if ctx_c is not None else opt_int(args, "-A", self.name, default=0) or 0
        sub = _subpath(args)
        vol = await open_volume(ctx, args, write=False)
        ws = workspace(ctx)
        listing = await vol.storage.walk(vol.location, sub, ws.scan_max_files)
        deadline = time.monotonic() + GREP_MATCH_SECONDS
        budget = ws.scan_max_bytes
        hits: list[_FileHits] = []
        skipped: list[str] = []
        wanted: list[str] = []
        for entry in listing.entries:
            if glob and not fnmatch.fnmatchcase(entry.path.rsplit("/", 1)[-1], glob):
                continue
            if entry.size > min(budget, GREP_MAX_FILE_BYTES):
                skipped.append(entry.path)
                continue
            budget -= entry.size
            wanted.append(entry.path)
        sizes = {e.path: e.size for e in listing.entries}
        for i in range(0, len(wanted), GREP_READ_BATCH):  # reads overlap (S3 round trips); matching is in order
            batch = wanted[i:i + GREP_READ_BATCH]
            datas = await asyncio.gather(*(vol.storage.read(vol.location, p, sizes[p]) for p in batch))
            texts = [(p, d.decode("utf-8", errors="replace")) for p, (d, _n) in zip(batch, datas, strict=True)
                     if b"\x00" not in d[:8192]]
            found = await asyncio.to_thread(_match_all, rx, texts, multiline, mode == "content", before, after,
                                            deadline)
            if found is None:
                raise ToolError(f"Grep: the pattern took longer than {GREP_MATCH_SECONDS:.0f} s to match; "
                                "simplify it", code="grep_timeout")
            hits += found
        out = _render(hits, mode, head, ws.grep_max_output_bytes)
        notes = []
        if listing.truncated:
            notes.append(f"[searched the first {ws.scan_max_files} files only]")
        if skipped:
            notes.append(f"[skipped {len(skipped)} file(s) over the size budget, e.g. {skipped[0]}]")
        return ToolResult((out or "no matches") + ("\n" + "\n".join(notes) if notes else ""))


def _match_all(
    rx: Any, texts: list[tuple[str, str]], multiline: bool, content: bool, before: int, after: int, deadline: float
) -> list[_FileHits] | None:
    """The files' matches (files without any left out); None when the time limit ran out."""
    out: list[_FileHits] = []
    for path, text in texts:
        found = _match(rx, text, path, multiline, content, before, after, deadline)
        if found is None:
            return None
        if found.lines:
            out.append(found)
    return out


def _match(
    rx: Any, text: str, path: str, multiline: bool, content: bool, before: int, after: int, deadline: float
) -> _FileHits | None:
    """The file's matches; None when the time limit ran out."""
    lines = text.splitlines()
    out = _FileHits(path)
    try:
        if multiline:
            starts = [0]
            for ln in lines:
                starts.append(starts[-1] + len(ln) + 1)
            seen: set[int] = set()
            for m in rx.finditer(text, timeout=max(0.001, deadline - time.monotonic())):
                n = _line_of(starts, m.start())
                if n not in seen:
                    seen.add(n)
                    out.lines.append((n + 1, lines[n] if n < len(lines) else "", [], []))
        else:
            for i, line in enumerate(lines):
                if rx.search(line, timeout=max(0.001, deadline - time.monotonic())):
                    out.lines.append((i + 1, line, [], []))
    except TimeoutError:
        return None
    if content and (before or after):
        out.lines = [(n, t, [(j + 1, lines[j]) for j in range(max(0, n - 1 - before), n - 1)],
                      [(j + 1, lines[j]) for j in range(n, min(len(lines), n + after))]) for n, t, _b, _a in out.lines]
    return out


def _line_of(starts: list[int], offset: int) -> int:
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _render(hits: list[_FileHits], mode: str, head: int, max_bytes: int) -> str:
    rows: list[str] = []
    size = 0
    truncated = False
    for fh in hits:
        if mode == "files_with_matches":
            batch = [fh.path]
        elif mode == "count":
            batch = [f"{fh.path}:{len(fh.lines)}"]
        else:
            batch = []
            for n, text, pre, post in fh.lines:
                batch += [f"{fh.path}-{j}-{t}" for j, t in pre]
                batch.append(f"{fh.path}:{n}:{text}")
                batch += [f"{fh.path}-{j}-{t}" for j, t in post]
        for row in batch:
            if len(rows) >= head or size + len(row) + 1 > max_bytes:
                truncated = True
                break
            rows.append(row)
            size += len(row) + 1
        if truncated:
            break
    if truncated:
        rows.append(f"[truncated at head_limit={head} or {max_bytes} bytes]")
    return "\n".join(rows)


class GlobTool:
    name = "Glob"
    effects: ToolEffects = "external"
    description = ("Find files in one of your volumes by glob pattern (*, ?, [..], and ** for any depth). "
                   f"Returns paths relative to the volume root, newest first, at most {GLOB_MAX_RESULTS}.")
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Glob pattern. Supports *, ?, [..], and ** (recursive)."},
            "path": {"type": "string", "description": "Optional subpath under the volume root to scope the search."},
            "volume": {"type": "string", "description": VOLUME_HELP},
        },
        "required": ["pattern"],
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        pattern = req_str(args, "pattern", self.name)
        if pattern.startswith("/"):
            raise ToolError("Glob: the pattern is relative to the volume root (or to path); no leading /")
        _glob_ok(pattern)
        sub = _subpath(args)
        vol = await open_volume(ctx, args, write=False)
        ws = workspace(ctx)
        listing = await vol.storage.walk(vol.location, sub, ws.scan_max_files)
        segments = [s for s in pattern.split("/") if s not in ("", ".")]
        prefix = f"{sub}/" if sub else ""
        matches = [e for e in listing.entries
                   if e.path.startswith(prefix) and _doublestar(segments, e.path[len(prefix):].split("/"))]
        matches.sort(key=lambda e: (-e.mtime, e.path))
        rows = [join("", e.path) for e in matches[:GLOB_MAX_RESULTS]]
        if len(matches) > GLOB_MAX_RESULTS:
            rows.append(f"[truncated at {GLOB_MAX_RESULTS}; {len(matches)} matches]")
        if listing.truncated:
            rows.append(f"[looked at the first {ws.scan_max_files} files only]")
        return ToolResult("\n".join(rows) if rows else "no matches")


def _doublestar(pat: list[str], path: list[str]) -> bool:
    if not pat:
        return not path
    if pat[0] == "**":
        return any(_doublestar(pat[1:], path[i:]) for i in range(len(path) + 1))
    if not path or not fnmatch.fnmatchcase(path[0], pat[0]):
        return False
    return _doublestar(pat[1:], path[1:])
