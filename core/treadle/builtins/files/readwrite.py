"""Read, Write and Edit (loomcycle's shapes: `path`, `volume`; Edit's `old_string`, `new_string`,
`replace_all`). Read adds Claude Code's `offset`/`limit` and numbers the lines it returns."""

from __future__ import annotations

from typing import Any

from treadle.builtins.files.common import (
    PATH_HELP,
    VOLUME_HELP,
    decode_text,
    file_path,
    journaled_write,
    open_volume,
    opt_bool,
    opt_int,
    req_str,
    workspace,
)
from treadle.errors import ToolError
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult
from treadle.volumes.base import FileMissing

DEFAULT_READ_LINES = 2000
MAX_LINE_CHARS = 2000


class ReadTool:
    name = "Read"
    effects: ToolEffects = "external"
    description = ("Read a UTF-8 text file from one of your volumes. Lines come back numbered (cat -n style); "
                   f"offset (1-based line) and limit (default {DEFAULT_READ_LINES} lines) page through long files.")
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": PATH_HELP},
            "volume": {"type": "string", "description": VOLUME_HELP},
            "offset": {"type": "integer", "minimum": 1, "description": "the first line to return (1-based)"},
            "limit": {"type": "integer", "minimum": 1,
                      "description": f"lines to return (default {DEFAULT_READ_LINES})"},
        },
        "required": ["path"],
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        path = file_path(args)
        offset = opt_int(args, "offset", self.name, default=1, lo=1) or 1
        limit = opt_int(args, "limit", self.name, default=DEFAULT_READ_LINES, lo=1) or DEFAULT_READ_LINES
        vol = await open_volume(ctx, args, write=False)
        cap = workspace(ctx).read_max_bytes
        data, size = await vol.storage.read(vol.location, path, cap)
        if b"\x00" in data[:8192]:
            return ToolResult(f"{path} is a binary file ({size} bytes); Read shows text only", is_error=True)
        text = data.decode("utf-8", errors="replace")
        if size == 0:
            return ToolResult(f"{path} exists and is empty")
        lines = text.splitlines()
        if size > cap and lines:
            lines = lines[:-1]  # the last line was cut by the cap
        chosen = lines[offset - 1: offset - 1 + limit]
        if not chosen:
            return ToolResult(f"{path} has {len(lines)} line(s); offset {offset} is past the end", is_error=True)
        body = "\n".join(f"{i:>6}\t{_cut(line)}" for i, line in enumerate(chosen, start=offset))
        notes = []
        if offset - 1 + limit < len(lines):
            notes.append(f"[lines {offset}-{offset + len(chosen) - 1} of {len(lines)}; use offset to read on]")
        if size > cap:
            notes.append(f"[the file is {size} bytes; only the first {cap} bytes were read]")
        return ToolResult(body + ("\n" + "\n".join(notes) if notes else ""))


def utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError(f"{what} is not valid Unicode text (a lone surrogate?)") from None


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " [line truncated]"


class WriteTool:
    name = "Write"
    effects: ToolEffects = "external"
    description = ("Create or overwrite a UTF-8 text file in one of your read-write volumes (atomic: readers see "
                   "the old or the new content). A re-run of the same call after a crash writes nothing twice.")
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": PATH_HELP},
            "content": {"type": "string", "description": "UTF-8 text to write. Replaces any existing content."},
            "volume": {"type": "string", "description": VOLUME_HELP + " Read-only volumes are refused."},
        },
        "required": ["path", "content"],
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        path = file_path(args)
        content = req_str(args, "content", self.name, allow_empty=True)
        data = utf8(content, "content")
        cap = workspace(ctx).write_max_bytes
        if len(data) > cap:
            raise ToolError(f"Write: content exceeds {cap} bytes (got {len(data)})", code="file_too_large")
        vol = await open_volume(ctx, args, write=True)

        def change(current: bytes | None) -> tuple[bytes, str]:
            verb = "created" if current is None else "overwrote"
            return data, f"{verb} {path} ({len(data)} bytes) in volume {vol.name}"

        return ToolResult(await journaled_write(ctx, vol, path, cap, self.name, change, replaces=True))


class EditTool:
    name = "Edit"
    effects: ToolEffects = "external"
    description = ("Replace exact text in an existing file in one of your read-write volumes. old_string must "
                   "occur exactly once unless replace_all is true (an ambiguous match is refused: give more "
                   "context). A re-run of the same call after a crash is not applied twice.")
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": PATH_HELP},
            "old_string": {"type": "string", "description": "Exact text to replace. Must be unique unless "
                           "replace_all is true."},
            "new_string": {"type": "string", "description": "Replacement text. Must differ from old_string."},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence instead of requiring "
                            "exactly one match."},
            "volume": {"type": "string", "description": VOLUME_HELP + " Read-only volumes are refused."},
        },
        "required": ["path", "old_string", "new_string"],
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        path = file_path(args)
        old = req_str(args, "old_string", self.name)
        new = req_str(args, "new_string", self.name, allow_empty=True)
        replace_all = opt_bool(args, "replace_all", self.name)
        if old == new:
            raise ToolError("Edit: old_string and new_string must differ")
        vol = await open_volume(ctx, args, write=True)

        def change(current: bytes | None) -> tuple[bytes, str]:
            if current is None:
                raise FileMissing(f"Edit: {path} does not exist (use Write to create a file)")
            text = decode_text(current, path, self.name)
            count = text.count(old)
            if count == 0:
                raise ToolError(f"Edit: old_string not found in {path}", code="edit_no_match")
            if count > 1 and not replace_all:
                raise ToolError(f"Edit: old_string occurs {count} times in {path}; give more context or set "
                                "replace_all=true", code="edit_ambiguous")
            replaced = text.replace(old, new) if replace_all else text.replace(old, new, 1)
            n = count if replace_all else 1
            return utf8(replaced, "new_string"), f"edited {path} ({n} replacement{'s' if n != 1 else ''})"

        return ToolResult(await journaled_write(ctx, vol, path, workspace(ctx).write_max_bytes, self.name, change))
