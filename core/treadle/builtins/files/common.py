"""What the file tools share: opening the call's volume, typed arguments, and the journaled write.

Exactly-once for writes (Write, Edit, NotebookEdit are "external" tools: their effect happens
outside the step's transaction, and a crash before the result commits re-runs the call with the
same `tool_use_id`). Before a call writes, it records in `volume_effects` the file's hash before
and after, and its result text. A re-run whose file already has the recorded "after" hash answers
the recorded result and writes nothing: an Edit is never applied twice, even when its new text
contains its old one. A re-run that finds the "before" content applies the call again (the first
attempt died before writing). So each call's write lands at most once per attempt and its
result reports it once; what no journal can undo is another writer changing the file between the
attempts (then the re-run works on what it finds, like a fresh call).

A stale attempt never lands (a worker stalled past its lease while another re-ran the call and
went on): the write is conditional on the file still being the version this attempt read
(`if_match`, volumes/base.py), and after journaling, the attempt checks that the transcript does
not hold the call's result yet. A later attempt that wrote since this one read breaks the
condition; one that committed before the check is seen by it; so whatever a later attempt or a
later call did is never overwritten by this one (FileChanged; its step's commit is fenced anyway).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from treadle.errors import ToolError
from treadle.specs.volumes import WorkspaceConfig
from treadle.store.volumes import Effect, VolumeStore
from treadle.tools.base import ToolContext
from treadle.volumes.base import FileChanged, TooLarge
from treadle.volumes.paths import clean_path
from treadle.volumes.service import OpenVolume, VolumesUnavailable

VOLUME_HELP = ("Optional volume name. Omit to use your default volume. Call Context op=self for the volumes "
               "you may access.")
PATH_HELP = ("Path RELATIVE to the volume root (e.g. \"src/main.py\"); absolute paths, ~ and .. that leave the "
             "volume are refused. Call Context op=self to see your volumes.")


def workspace(ctx: ToolContext) -> WorkspaceConfig:
    return ctx.services.config.workspace


async def open_volume(ctx: ToolContext, args: dict[str, Any], *, write: bool) -> OpenVolume:
    service = ctx.services.volumes
    if service is None:
        raise VolumesUnavailable("volumes are not available in this runtime")
    return await service.open(ctx.tenant_id, ctx.run_id, ctx.agent_config, args.get("volume"), write=write)


def req_str(args: dict[str, Any], key: str, tool: str, *, allow_empty: bool = False) -> str:
    v = args.get(key)
    if not isinstance(v, str) or (not v and not allow_empty):
        raise ToolError(f"{tool}: {key} is required (a string)")
    return v


def opt_int(args: dict[str, Any], key: str, tool: str, *, default: int | None, lo: int = 0) -> int | None:
    v = args.get(key)
    if v is None:
        return default
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise ToolError(f"{tool}: {key} must be an integer ≥ {lo}")
    return v


def opt_bool(args: dict[str, Any], key: str, tool: str) -> bool:
    v = args.get(key, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise ToolError(f"{tool}: {key} must be a boolean")
    return v


def file_path(args: dict[str, Any], key: str = "path") -> str:
    return clean_path(args.get(key), what=key)


def sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


async def read_existing(vol: OpenVolume, path: str, max_bytes: int, tool: str) -> bytes | None:
    """The whole file, None when absent; TooLarge beyond `max_bytes`."""
    entry = await vol.storage.stat(vol.location, path)
    if entry is None:
        return None
    if entry.size > max_bytes:
        raise TooLarge(f"{tool}: {path} is {entry.size} bytes, over the limit of {max_bytes}")
    data, size = await vol.storage.read(vol.location, path, max_bytes + 1)
    if size > max_bytes:
        raise TooLarge(f"{tool}: {path} is {size} bytes, over the limit of {max_bytes}")
    return data


def decode_text(data: bytes, path: str, tool: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{tool}: {path} is not UTF-8 text") from None


#: given the file's current bytes (None: absent) → (new bytes, result text); raises ToolError to refuse
Change = Callable[[bytes | None], tuple[bytes, str]]


async def journaled_write(
    ctx: ToolContext, vol: OpenVolume, path: str, max_bytes: int, tool: str, change: Change, *,
    replaces: bool = False,
) -> str:
    """Apply `change` to the file once per call (see the module docstring); returns the result.
    `replaces`: the change ignores the current content (Write), so a file over `max_bytes` may
    be replaced without being read."""
    service = ctx.services.volumes
    assert service is not None
    async with service.file_lock(vol.location, path):
        return await _journaled_write(ctx, service.store, vol, path, max_bytes, tool, change, replaces)


async def _journaled_write(
    ctx: ToolContext, journal: VolumeStore, vol: OpenVolume, path: str, max_bytes: int, tool: str, change: Change,
    replaces: bool,
) -> str:
    entry = await vol.storage.stat(vol.location, path)
    if replaces and entry is not None and entry.size > max_bytes:
        current: bytes | None = b""  # too large to be what this call wrote: never equal to its hash
        now: str | None = f"size:{entry.size}"
    else:
        current = await read_existing(vol, path, max_bytes, tool) if entry is not None else None
        now = sha256(current)
    prior = await journal.effect(ctx.run_id, ctx.tool_use_id, vol.location, path)
    if prior is not None and now == prior.after_sha256:
        return prior.result  # an earlier attempt of this very call wrote it
    new, result = change(current)
    if len(new) > max_bytes:
        raise TooLarge(f"{tool}: the result would be {len(new)} bytes, over the limit of {max_bytes}")
    after = sha256(new)
    assert after is not None
    await journal.record_effect(ctx.tenant_id, ctx.run_id, ctx.tool_use_id, vol.location, path,
                                Effect(now, after, result), user_id=ctx.principal.user_id)
    if new != current or now != after:
        if await journal.answered(ctx.run_id, ctx.tool_use_id):
            raise FileChanged(f"{tool}: another attempt of this call has committed its result; this stale "
                              "attempt writes nothing")
        tag = entry.tag if entry is not None else None
        await vol.storage.write(vol.location, path, new, if_match=tag, if_absent=entry is None)
    return result
