"""Watching the engine fold transactional calls into the step commit (store/folding.py)."""

from __future__ import annotations

from typing import Any


def recording_folds(rt: Any) -> list[str]:
    """The tool_use_ids whose writes `rt`'s step commits carried, as they are folded from now on."""
    folded: list[str] = []
    inner = rt.engine.steps.fold

    def fold(tool_use_id: str, write: Any) -> bool:
        taken = bool(inner(tool_use_id, write))
        if taken:
            folded.append(tool_use_id)
        return taken

    rt.engine.steps.fold = fold
    return folded
