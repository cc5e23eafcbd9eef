"""The host adapter follows no symlink out of a volume: reading, writing through, listing and
grepping all refuse or skip what resolves outside the volume's directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.workspace import AGENTS, CONFIG, Caller
from treadle.errors import ToolError
from treadle.runtime import Runtime
from treadle.volumes.host import HostDirStorage
from treadle.volumes.paths import persistent_location


@pytest.fixture
async def host_ws(open_runtime: object, tmp_path: Path) -> tuple[Runtime, Path]:
    rt, _d = await open_runtime(AGENTS, config=CONFIG)  # type: ignore[operator]
    rt.volumes.storage = HostDirStorage(tmp_path / "volumes")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    return rt, outside


async def test_symlinks_out_of_the_volume_are_refused(host_ws: tuple[Runtime, Path], tmp_path: Path) -> None:
    rt, outside = host_ws
    call = Caller(rt)
    await call("Write", {"path": "ok.txt", "content": "fine"})
    vol = tmp_path / "volumes" / persistent_location(call.tenant, "work")
    os.symlink(outside / "secret.txt", vol / "link.txt")
    os.symlink(outside, vol / "dir")
    os.symlink(vol / "ok.txt", vol / "inside-link.txt")  # a link that stays inside is fine
    for path in ("link.txt", "dir/secret.txt"):
        with pytest.raises(ToolError, match="outside the volume") as exc:
            await call("Read", {"path": path})
        assert exc.value.code == "path_refused"
    with pytest.raises(ToolError, match="outside the volume"):
        await call("Write", {"path": "dir/new.txt", "content": "x"})
    with pytest.raises(ToolError, match="outside the volume"):
        await call("Write", {"path": "link.txt", "content": "x"})
    assert not (outside / "new.txt").exists() and (outside / "secret.txt").read_text() == "TOP SECRET\n"
    assert (await call("Read", {"path": "inside-link.txt"})).content == "     1\tfine"
    assert (await call("Grep", {"pattern": "SECRET"})).content == "no matches"
    listed = (await call("Glob", {"pattern": "**"})).content.splitlines()
    assert sorted(listed) == ["inside-link.txt", "ok.txt"]
