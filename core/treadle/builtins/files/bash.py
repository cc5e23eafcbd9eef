"""Bash — RESTRICTED, NOT ISOLATED. Off unless the operator sets `workspace.bash.enabled: true`;
the sidecar only (the cloud shape's S3 volumes have no directory to run in, so it refuses).

What it does: runs `/bin/sh -c <command>` with the agent's read-write volume as the working
directory, an environment scrubbed to PATH, HOME (the volume), LANG and the operator's
`env_passthrough` names, no stdin and no TTY, in its own process group, killed (the whole group)
at the timeout; stdout and stderr are captured together up to `max_output_bytes`.
What it does not do: stop the command from reading or writing any path the treadle process can
reach by absolute path, opening network connections, or leaving daemons that escape the process
group. Run treadle in a container (or a VM) when agents with Bash take untrusted input.
A re-run after a crash runs the command again: `TREADLE_TOOL_USE_ID` is set for scripts that
want to detect that."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

from treadle.builtins.files.common import VOLUME_HELP, open_volume, req_str, workspace
from treadle.errors import ToolError
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult


class BashUnavailable(ToolError):
    code = "bash_unavailable"


class BashTool:
    name = "Bash"
    effects: ToolEffects = "external"
    description = ("Run a shell command (/bin/sh -c) with your read-write volume as the working directory; "
                   "returns stdout+stderr. Restricted (scrubbed environment, timeout, output cap), not isolated. "
                   "Use paths relative to the volume.")
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "Shell command, run via /bin/sh -c in the volume root."},
            "timeout_seconds": {"type": "integer", "minimum": 1, "description": "Per-call timeout (capped)."},
            "volume": {"type": "string", "description": VOLUME_HELP + " Read-only volumes are refused (a shell "
                       "cannot honour read-only)."},
        },
        "required": ["command"],
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        cfg = workspace(ctx).bash
        if not cfg.enabled:
            raise BashUnavailable("Bash is not enabled by the operator (workspace.bash.enabled in treadle.yaml)")
        command = req_str(args, "command", self.name)
        timeout = cfg.timeout_seconds
        given = args.get("timeout_seconds")
        if given is not None:
            if not isinstance(given, int | float) or isinstance(given, bool) or given <= 0:
                raise ToolError("Bash: timeout_seconds must be a positive number")
            timeout = float(given)
        timeout = min(timeout, cfg.max_timeout_seconds)
        vol = await open_volume(ctx, args, write=True)
        if not vol.storage.supports_exec:
            raise BashUnavailable(f"Bash is unavailable here: volumes are kept in {vol.storage.kind}, not on a "
                                  "local disk (the cloud shape runs no shell)")
        cwd = vol.storage.exec_dir(vol.location)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), "LANG": "C.UTF-8",
               "TREADLE_TOOL_USE_ID": ctx.tool_use_id}
        for name in cfg.env_passthrough:
            if name in os.environ:
                env[name] = os.environ[name]
        out, truncated, status = await run_restricted(command, cwd=str(cwd), env=env, timeout=timeout,
                                                      max_output=cfg.max_output_bytes)
        text = out.decode("utf-8", errors="replace")
        if truncated:
            text += f"\n[output truncated at {cfg.max_output_bytes} bytes]"
        if status is None:
            return ToolResult(text + f"\n[killed: timed out after {timeout:g} s]", is_error=True)
        if status != 0:
            return ToolResult(text + f"\n[exit status {status}]", is_error=True)
        return ToolResult(text)


async def run_restricted(
    command: str, *, cwd: str, env: dict[str, str], timeout: float, max_output: int
) -> tuple[bytes, bool, int | None]:
    """(output up to `max_output`, whether more was dropped, exit status or None on timeout)."""
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", command, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
    )
    chunks: list[bytes] = []
    kept = 0
    dropped = False

    async def pump() -> None:
        nonlocal kept, dropped
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            room = max_output - kept
            if room > 0:
                chunks.append(chunk[:room])
                kept += min(room, len(chunk))
            if len(chunk) > room:
                dropped = True  # keep draining so the command is never blocked on a full pipe

    reader = asyncio.create_task(pump())
    try:
        await asyncio.wait_for(proc.wait(), timeout)
        status: int | None = proc.returncode
    except TimeoutError:
        status = None
    finally:  # the whole group, also after a normal exit: nothing it started outlives the call
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.wait(), 5)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(reader, 5)  # every writer is gone: the pipe reaches its end
    return b"".join(chunks), dropped, status
