"""NotebookEdit (loomcycle's shape: `file_path`, `cell_id`, `cell_type`, `source`, `mode`,
`volume`): replace, insert or delete one cell of a Jupyter notebook, keeping every other cell and
the notebook's metadata. A cell it inserts gets an id derived from the call's `tool_use_id`, so
a re-run after a crash produces the same notebook."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from treadle.builtins.files.common import VOLUME_HELP, decode_text, journaled_write, open_volume, workspace
from treadle.errors import ToolError
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult
from treadle.volumes.base import FileMissing
from treadle.volumes.paths import clean_path

MODES = ("replace", "insert", "delete")
CELL_TYPES = ("code", "markdown")


class NotebookEditTool:
    name = "NotebookEdit"
    effects: ToolEffects = "external"
    description = ("Edit one cell of a Jupyter .ipynb notebook in one of your read-write volumes: replace, insert "
                   "(after cell_id, or first when cell_id is empty) or delete. Other cells and metadata are kept.")
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "file_path": {"type": "string", "description": "Path to the .ipynb file, relative to the volume root."},
            "cell_id": {"type": "string", "description": "Target cell id (replace, delete; insert: after it)."},
            "cell_type": {"type": "string", "enum": list(CELL_TYPES)},
            "source": {"type": "string", "description": "Cell content (replace, insert)."},
            "mode": {"type": "string", "enum": list(MODES), "description": "Default replace."},
            "volume": {"type": "string", "description": VOLUME_HELP + " Read-only volumes are refused."},
        },
        "required": ["file_path"],
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        path = clean_path(args.get("file_path"), what="file_path")
        if not path.endswith(".ipynb"):
            raise ToolError("NotebookEdit: file_path must end in .ipynb")
        mode = args.get("mode") or "replace"
        if mode not in MODES:
            raise ToolError(f"NotebookEdit: unknown mode {mode!r} (want {'|'.join(MODES)})")
        cell_id = args.get("cell_id") or ""
        cell_type = args.get("cell_type")
        source = args.get("source")
        if not isinstance(cell_id, str) or (cell_type is not None and cell_type not in CELL_TYPES):
            raise ToolError("NotebookEdit: cell_id must be a string and cell_type code or markdown")
        if mode in ("replace", "delete") and not cell_id:
            raise ToolError(f"NotebookEdit: cell_id is required for mode={mode}")
        if mode in ("replace", "insert") and (not isinstance(source, str) or not source):
            raise ToolError(f"NotebookEdit: source is required for mode={mode}")
        vol = await open_volume(ctx, args, write=True)
        new_id = hashlib.sha256(ctx.tool_use_id.encode()).hexdigest()[:8]

        def change(current: bytes | None) -> tuple[bytes, str]:
            if current is None:
                raise FileMissing(f"NotebookEdit: {path} does not exist")
            try:
                nb = json.loads(decode_text(current, path, self.name))
            except ValueError as exc:
                raise ToolError(f"NotebookEdit: {path} is not valid notebook JSON: {exc}") from None
            cells = nb.get("cells") if isinstance(nb, dict) else None
            if not isinstance(cells, list):
                raise ToolError(f"NotebookEdit: {path} has no cells list")
            idx = next((i for i, c in enumerate(cells) if isinstance(c, dict) and c.get("id") == cell_id), -1)
            if cell_id and idx < 0:
                raise ToolError(f"NotebookEdit: cell {cell_id!r} not found in {path}")
            if mode == "replace":
                _replace(cells[idx], str(source), cell_type)
            elif mode == "insert":
                kind = cell_type or "code"
                cell: dict[str, Any] = {"cell_type": kind, "id": new_id, "metadata": {},
                                        "source": split_source(str(source))}
                if kind == "code":
                    cell |= {"execution_count": None, "outputs": []}
                cells.insert(idx + 1 if cell_id else 0, cell)
            else:
                del cells[idx]
            out = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
            return out.encode("utf-8"), f"notebook {mode}: {path} ({len(cells)} cells)" + (
                f"; new cell id {new_id}" if mode == "insert" else "")

        return ToolResult(await journaled_write(ctx, vol, path, workspace(ctx).notebook_max_bytes, self.name,
                                                change))


def _replace(cell: dict[str, Any], source: str, cell_type: str | None) -> None:
    was_code = cell.get("cell_type") == "code"
    cell["source"] = split_source(source)
    if cell_type is None:
        return
    cell["cell_type"] = cell_type
    if cell_type == "markdown":
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
    elif not was_code:
        cell.setdefault("outputs", [])
        cell.setdefault("execution_count", None)


def split_source(text: str) -> list[str]:
    """Jupyter's on-disk source: one string per line, each but the last keeping its newline."""
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out
