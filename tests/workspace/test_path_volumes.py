"""loomcycle's static volumes with an operator path (issue 39 item 7): a treadle.yaml volume whose
`path` is an existing host directory is that directory — a coding agent works on an existing
checkout — for every tenant; `dynamic_root` places runtime VolumeDefs under another one. A path
that is missing or not a directory, a path on an ephemeral volume, two dynamic roots, or a
VolumeDef naming a path are refused by name; the S3 adapter refuses a host directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.workspace import FILE_TOOLS, Caller
from treadle.config import parse_config
from treadle.errors import ConfigError, ToolError
from treadle.specs.volumes import VolumeBinding
from treadle.volumes.host import HostDirStorage


def _config(repo: Path, dyn: Path) -> dict[str, Any]:
    return {"volumes": {"repo": {"path": str(repo), "mode": "rw", "default": True},
                        "docs": {"path": str(repo / "docs"), "mode": "ro"},
                        "dyn": {"path": str(dyn), "dynamic_root": True, "mode": "ro"}}}


AGENTS: dict[str, Any] = {
    "coder": {"tools": FILE_TOOLS, "volumes": ["repo", "docs"], "volume_def_scopes": ["any"]},
}


@pytest.fixture
def checkout(tmp_path: Path) -> tuple[Path, Path]:
    repo, dyn = tmp_path / "checkout", tmp_path / "dynroot"
    (repo / "docs").mkdir(parents=True)
    (repo / "README.md").write_text("# the project\n")
    (repo / "docs" / "guide.md").write_text("read me\n")
    dyn.mkdir()
    return repo, dyn


async def test_an_agent_works_on_the_operators_directory(open_runtime: Any, checkout: tuple[Path, Path],
                                                         tmp_path: Path) -> None:
    repo, dyn = checkout
    rt, _ = await open_runtime(AGENTS, config=_config(repo, dyn))
    rt.volumes.storage = HostDirStorage(tmp_path / "treadle-volumes")
    call = Caller(rt, "coder")
    assert "the project" in (await call("Read", {"path": "README.md"})).content
    await call("Edit", {"path": "README.md", "old_string": "the project", "new_string": "the edited project"})
    assert repo.joinpath("README.md").read_text() == "# the edited project\n"  # the operator's file itself
    await call("Write", {"path": "src/new.py", "content": "print(1)\n"})
    assert repo.joinpath("src", "new.py").read_text() == "print(1)\n"
    assert "read me" in (await call("Read", {"path": "guide.md", "volume": "docs"})).content
    with pytest.raises(ToolError, match="read-only"):
        await call("Write", {"path": "x.md", "content": "x", "volume": "docs"})
    with pytest.raises(ToolError, match="leaves the volume"):
        await call("Read", {"path": "../dynroot"})
    other = Caller(rt, "coder", tenant="another-tenant")  # the same directory for every tenant
    assert "edited project" in (await other("Read", {"path": "README.md"})).content
    assert not (tmp_path / "treadle-volumes").exists() or not any((tmp_path / "treadle-volumes").rglob("README.md"))

    # dynamic_root: a tenant's VolumeDef lives under the operator's directory (an agent bound to it)
    created = await call("VolumeDef", {"op": "create", "name": "mine", "overlay": {"mode": "rw"}})
    assert not created.is_error, created.content
    maker = rt.config.agents["coder"].model_copy(update={"volumes": [VolumeBinding(name="mine")]})
    opened = await rt.volumes.open(call.tenant, call.run_id, maker, "mine", write=True)
    await opened.storage.write(opened.location, "notes.txt", b"kept\n")
    placed = list(dyn.rglob("notes.txt"))
    assert len(placed) == 1 and placed[0].read_text() == "kept\n", placed
    assert call.tenant in str(placed[0])  # <root>/t/<tenant>/v/mine
    with pytest.raises(ToolError, match="path"):
        await call("VolumeDef", {"op": "create", "name": "escape", "overlay": {"path": "/etc"}})


async def test_the_s3_adapter_refuses_a_host_directory(open_runtime: Any, checkout: tuple[Path, Path],
                                                       moto_url: str) -> None:
    import secrets

    import boto3

    from treadle_cloud.s3volumes import S3VolumeStorage

    repo, dyn = checkout
    rt, _ = await open_runtime(AGENTS, config=_config(repo, dyn))
    client = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    bucket = f"vols-{secrets.token_hex(6)}"
    client.create_bucket(Bucket=bucket)
    rt.volumes.storage = S3VolumeStorage(client, bucket, "treadle/volumes")
    with pytest.raises(ToolError, match="maps a host directory"):
        await Caller(rt, "coder")("Read", {"path": "README.md"})


@pytest.mark.parametrize(("volume", "message"), [
    ({"path": "{missing}"}, "must be an existing directory"),
    ({"path": "{file}"}, "must be an existing directory"),
    ({"path": "{dir}", "ephemeral": True}, "cannot be ephemeral"),
    ({"dynamic_root": True}, "dynamic_root needs a path"),
])
def test_bad_paths_are_refused_at_load(tmp_path: Path, volume: dict[str, Any], message: str) -> None:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-dir").mkdir()
    places = {"{missing}": str(tmp_path / "nope"), "{file}": str(tmp_path / "a-file"), "{dir}": str(tmp_path / "a-dir")}
    spec = {k: places.get(v, v) if isinstance(v, str) else v for k, v in volume.items()}
    with pytest.raises(ConfigError, match=message):
        parse_config({"volumes": {"v": spec}, "agents": {"a": {"model": "echo"}}})


def test_two_dynamic_roots_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at most one volume may be dynamic_root"):
        parse_config({"volumes": {"a": {"path": str(tmp_path), "dynamic_root": True},
                                  "b": {"path": str(tmp_path), "dynamic_root": True}},
                      "agents": {"x": {"model": "echo"}}})
