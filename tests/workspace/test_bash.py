"""The restricted Bash: off unless enabled, the volume as cwd, a scrubbed environment, a timeout
that kills the whole process group, an output cap, rw volumes only, and no Bash on S3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.workspace import AGENTS, CONFIG, Caller
from treadle.errors import ToolError
from treadle.runtime import Runtime
from treadle.testing import until
from treadle.volumes.host import HostDirStorage

BASH = {"bash": {"enabled": True, "timeout_seconds": 5, "max_output_bytes": 4096}}


async def _rt(open_runtime: Any, tmp_path: Path, workspace: dict[str, Any] | None) -> Runtime:
    config = {**CONFIG, **({"workspace": workspace} if workspace else {})}
    rt, _d = await open_runtime(AGENTS, config=config)
    rt.volumes.storage = HostDirStorage(tmp_path / "volumes")
    result: Runtime = rt
    return result


async def test_bash_is_off_unless_enabled(open_runtime: Any, tmp_path: Path) -> None:
    rt = await _rt(open_runtime, tmp_path, None)
    with pytest.raises(ToolError, match="not enabled") as exc:
        await Caller(rt)("Bash", {"command": "echo hi"})
    assert exc.value.code == "bash_unavailable"


async def test_bash_runs_in_the_volume_with_a_scrubbed_environment(
    open_runtime: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOME_API_KEY", "sk-should-not-leak")
    rt = await _rt(open_runtime, tmp_path, BASH)
    call = Caller(rt)
    await call("Write", {"path": "hello.txt", "content": "from the volume\n"})
    r = await call("Bash", {"command": "cat hello.txt; echo made > out.txt; env | sort"})
    assert not r.is_error, r.content
    assert r.content.startswith("from the volume\n")
    assert "SOME_API_KEY" not in r.content and "DATABASE_URL" not in r.content
    assert {line.split("=", 1)[0] for line in r.content.splitlines()[1:] if "=" in line} <= {
        "PATH", "HOME", "LANG", "TREADLE_TOOL_USE_ID", "PWD", "SHLVL", "_", "OLDPWD"}
    assert (await call("Read", {"path": "out.txt"})).content == "     1\tmade"
    r = await call("Bash", {"command": "exit 3"})
    assert r.is_error and "[exit status 3]" in r.content
    with pytest.raises(ToolError, match="read-only"):
        await call("Bash", {"command": "true", "volume": "refs"})


async def test_bash_timeout_kills_the_group_and_output_is_capped(open_runtime: Any, tmp_path: Path) -> None:
    rt = await _rt(open_runtime, tmp_path, BASH)
    call = Caller(rt)
    r = await call("Bash", {"command": "sleep 60 & echo child $!; sleep 30", "timeout_seconds": 1})
    assert r.is_error and "timed out after 1 s" in r.content
    child = int(r.content.split("child ", 1)[1].split()[0])
    await until(lambda: _dead(child), timeout=10, what=f"the background child {child} to die with its group")
    r = await call("Bash", {"command": "head -c 100000 /dev/zero | tr '\\0' x"})
    assert not r.is_error and r.content.startswith("x" * 4096) and "[output truncated at 4096 bytes]" in r.content
    assert len(r.content) < 4200


async def _dead(pid: int) -> bool:
    """Gone, or a zombie waiting for init to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:  # noqa: ASYNC230 - procfs, never blocks
            stat = f.read()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


async def test_bash_refuses_on_s3(open_runtime: Any, s3_client: Any) -> None:
    from treadle_cloud.s3volumes import S3VolumeStorage

    rt, _d = await open_runtime(AGENTS, config={**CONFIG, "workspace": BASH})
    s3_client.create_bucket(Bucket="bash-refused")
    rt.volumes.storage = S3VolumeStorage(s3_client, "bash-refused")
    with pytest.raises(ToolError, match="cloud shape runs no shell") as exc:
        await Caller(rt)("Bash", {"command": "echo hi"})
    assert exc.value.code == "bash_unavailable"
