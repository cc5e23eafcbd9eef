"""Volumes through real runs: ephemeral volumes purged when the top-level run ends (and by the
sweeper when a crash kept that from happening), a sub-agent never widening its parent's volumes,
VolumeDef on the def lifecycle, and treadle.yaml's checks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.workspace import FILE_TOOLS, VOLUMES, new_id
from treadle.config import AgentConfig, parse_config
from treadle.dispatch.inline import InlineDispatcher
from treadle.errors import ConfigError, ToolError
from treadle.providers.base import ModelRequest
from treadle.runtime import Runtime
from treadle.store.runs import NewRun
from treadle.testing import Reply, ScriptedProvider, open_test_runtime, tool_results, tool_use
from treadle.volumes.host import HostDirStorage
from treadle.volumes.paths import ephemeral_location

CONFIG = {"volumes": {**VOLUMES, "shared": {"mode": "rw"}}}


def _prompt(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": text}]}]


@dataclass
class ScratchWriter:
    """The model of an `eph` agent that writes notes/draft.md to its ephemeral `scratch` volume,
    then records in `seen` whether the file was there while its run went on."""

    storage: HostDirStorage
    seen: list[bool] = field(default_factory=list)
    location: str = ""  # the started run's scratch volume, below the storage root

    def model(self, req: ModelRequest) -> Reply:
        if not tool_results(req):
            return [tool_use("Write", {"path": "notes/draft.md", "content": "scratch work", "volume": "scratch"})]
        self.seen.append((self.volume / "notes" / "draft.md").is_file())
        return "done"

    async def start(self, rt: Runtime) -> tuple[str, str]:
        """Start `eph` in a new tenant: (tenant, run id)."""
        tenant = new_id("t")
        run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent="eph", segments=_prompt("go")))
        self.location = ephemeral_location(tenant, run.id, "scratch")
        return tenant, run.id

    @property
    def volume(self) -> Path:
        return self.storage.root / self.location


@asynccontextmanager
async def scratch_writer(db_url: str, tmp_path: Path) -> AsyncIterator[tuple[Runtime, InlineDispatcher, ScratchWriter]]:
    writer = ScratchWriter(HostDirStorage(tmp_path / "volumes"))
    agents = {"eph": {"provider": "scripted", "tools": ["Write"], "volumes": ["scratch"]}}
    provider = ScriptedProvider(writer.model)
    async with open_test_runtime(agents, database_url=db_url, config=CONFIG, providers=[provider]) as (rt, d):
        rt.volumes.storage = writer.storage
        yield rt, d, writer


async def _events(rt: Runtime, tenant: str, run_id: str) -> list[dict[str, Any]]:
    return [{"type": e.type, **e.payload} for e in await rt.runs.events(tenant, run_id)]


async def test_an_ephemeral_volume_is_purged_when_its_run_ends(db_url: str, tmp_path: Path) -> None:
    async with scratch_writer(db_url, tmp_path) as (rt, d, w):
        tenant, run_id = await w.start(rt)
        await d.drain()
        final = await rt.runs.get(tenant, run_id)
        assert final is not None and final.status == "completed"
        assert w.seen == [True]  # the file was there while the run went on
        assert not w.volume.exists()
        assert await rt.volumes.store.instances(run_id) == []


async def test_the_last_commit_forgets_the_journal_and_skips_the_purge_when_nothing_is_rooted(
    db_url: str, tmp_path: Path
) -> None:
    """A run that wrote to a persistent volume: its file-effect journal goes with the statement
    that ends it, and the after-the-end purge (a round trip) is skipped — no instance is rooted at
    the run. The ephemeral run beside it still gets its purge."""
    storage = HostDirStorage(tmp_path / "volumes")
    ended: list[str] = []

    def model(req: ModelRequest) -> Reply:
        volume = "scratch" if req.messages[0].text() == "ephemeral" else "shared"
        if not tool_results(req):
            return [tool_use("Write", {"path": "n.md", "content": "x", "volume": volume})]
        return "done"

    agents = {"w": {"provider": "scripted", "tools": ["Write"], "volumes": ["shared", "scratch"]}}
    async with open_test_runtime(agents, database_url=db_url, config=CONFIG,
                                 providers=[ScriptedProvider(model)]) as (rt, d):
        rt.volumes.storage = storage
        purge = rt.engine.on_run_end
        assert purge is not None

        async def recorded(run_id: str) -> object:
            ended.append(run_id)
            return await purge(run_id)

        rt.engine.on_run_end = recorded
        tenant = new_id("t")
        kept, _ = await rt.start_run(NewRun(tenant_id=tenant, agent="w", segments=_prompt("persistent")))
        eph, _ = await rt.start_run(NewRun(tenant_id=tenant, agent="w", segments=_prompt("ephemeral")))
        await d.drain()
        for run in (kept, eph):
            final = await rt.runs.get(tenant, run.id)
            assert final is not None and final.status == "completed"
        async with rt.pool.connection() as conn:
            cur = await conn.execute("SELECT count(*) AS n FROM volume_effects WHERE run_id = ANY(%s)",
                                     ([kept.id, eph.id],))
            assert (await cur.fetchone() or {})["n"] == 0
        assert ended == [eph.id]
        assert await rt.volumes.store.instances(eph.id) == []


async def test_the_sweeper_purges_what_a_crash_left(db_url: str, tmp_path: Path) -> None:
    async with scratch_writer(db_url, tmp_path) as (rt, d, w):
        rt.engine.on_run_end = None  # the process died between the run's last commit and its purge
        _, run_id = await w.start(rt)
        await d.drain()
        assert (w.volume / "notes" / "draft.md").is_file()
        await rt.triggers.sweeper().tick_once()
        assert not w.volume.exists()
        assert await rt.volumes.store.instances(run_id) == []


async def test_a_child_never_gets_more_than_its_parent(db_url: str, tmp_path: Path) -> None:
    def boss(req: ModelRequest) -> Reply:
        if not tool_results(req):
            return [tool_use("Agent", {"name": "kid", "prompt": "work"})]
        return "boss done"

    def kid(req: ModelRequest) -> Reply:
        done = tool_results(req)
        if not done:
            return [tool_use("Context", {"op": "self"})]
        if len(done) == 1:
            return [tool_use("Write", {"path": "x.txt", "content": "widened?", "volume": "shared"})]
        if len(done) == 2:
            return [tool_use("Write", {"path": "y.txt", "content": "ok", "volume": "work"})]
        return "kid done"

    agents = {
        # the parent holds `shared` read-only and no `scratch`
        "boss": {"provider": "boss_model", "tools": ["Agent"],
                 "volumes": ["work", {"name": "shared", "mode": "ro"}]},
        "kid": {"provider": "kid_model", "tools": FILE_TOOLS, "volumes": ["work", "shared", "scratch"]},
    }
    providers = [ScriptedProvider(boss, name="boss_model"), ScriptedProvider(kid, name="kid_model")]
    async with open_test_runtime(agents, database_url=db_url, config=CONFIG, providers=providers) as (rt, d):
        rt.volumes.storage = HostDirStorage(tmp_path / "volumes")
        tenant = new_id("t")
        run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent="boss", segments=_prompt("go")))
        await d.drain()
        async with rt.pool.connection() as conn:
            cur = await conn.execute("SELECT id FROM runs WHERE parent_run_id = %s", (run.id,))
            child_id = next(r["id"] for r in await cur.fetchall())
        results = [e for e in await _events(rt, tenant, child_id) if e["type"] == "tool_result"]
        volumes = json.loads(results[0]["text"])["volumes"]
        assert [(b["name"], b["mode"]) for b in volumes["bindings"]] == [("work", "rw"), ("shared", "ro")]
        assert volumes["unavailable"] == ["scratch"]
        assert results[1]["is_error"] and "read-only" in results[1]["text"]
        assert not results[2]["is_error"]
        final = await rt.runs.get(tenant, run.id)
        assert final is not None and final.status == "completed"


async def test_volumedef_on_the_def_lifecycle(open_runtime: Any, tmp_path: Path) -> None:
    from tests.support.workspace import AGENTS, Caller

    rt, _d = await open_runtime(AGENTS, config=CONFIG)
    rt.volumes.storage = HostDirStorage(tmp_path / "volumes")
    call = Caller(rt)
    created = json.loads((await call("VolumeDef", {"op": "create", "name": "dyn", "mode": "rw"})).content)
    assert created["body"] == {"mode": "rw", "ephemeral": False} and created["active"]
    again = json.loads((await call("VolumeDef", {"op": "create", "name": "dyn", "mode": "rw"})).content)
    assert again["deduplicated"] is True
    with pytest.raises(ToolError, match=r"treadle\.yaml"):
        await call("VolumeDef", {"op": "create", "name": "work", "mode": "rw"})
    with pytest.raises(ToolError, match="path"):
        await call("VolumeDef", {"op": "create", "name": "evil", "overlay": {"path": "/etc"}})
    with pytest.raises(ToolError, match="default-deny"):
        await Caller(rt, "reader", tenant=call.tenant)("VolumeDef", {"op": "list"})
    listing = json.loads((await call("VolumeDef", {"op": "list"})).content)
    assert [d["name"] for d in listing["defs"]] == ["dyn"]
    assert sorted(s["name"] for s in listing["static"]) == ["refs", "scratch", "shared", "work"]

    # an agent (e.g. an AgentDef) bound to the runtime volume reaches it
    binder = AgentConfig(tools=["Write", "Read"], volumes=[{"name": "dyn"}])  # type: ignore[list-item]
    ctx = rt.tool_context(call.tenant, call.run_id, "binder", agent_config=binder)
    write = rt.registry.get("Write")
    assert write is not None
    await write.invoke(ctx, {"path": "a.txt", "content": "dynamic"})
    location = tmp_path / "volumes" / f"t/{call.tenant}/v/dyn"
    assert (location / "a.txt").read_text() == "dynamic"

    deleted = json.loads((await call("VolumeDef", {"op": "delete", "name": "dyn"})).content)
    assert deleted["deleted"] and (location / "a.txt").exists()  # delete keeps the files
    with pytest.raises(ToolError, match="bound to no volume"):
        await write.invoke(ctx, {"path": "b.txt", "content": "x"})
    await call("VolumeDef", {"op": "create", "name": "dyn", "mode": "rw"})
    purged = json.loads((await call("VolumeDef", {"op": "purge", "name": "dyn"})).content)
    assert purged == {"name": "dyn", "purged": True, "retired": True, "files_deleted": 1}
    assert not location.exists()


@pytest.mark.parametrize(("config", "message"), [
    ({"agents": {"a": {"volumes": ["nope"]}}}, "agents.a.volumes.0: unknown volume 'nope'"),
    ({"volumes": {"a": {"default": True}, "b": {"default": True}}}, "at most one volume may be default"),
    ({"volumes": {"a": {"mode": "rwx"}}}, "volumes.a.mode"),
    ({"volumes": {"a": {"path": "/srv/nothing-here-treadle"}}}, "volumes.a: Value error, path .* must be an existing"),
    ({"volumes": {"a": {}}, "agents": {"x": {"volumes": ["a", "a"]}}}, "binds a volume twice"),
    ({"workspace": {"bash": {"timeout_seconds": 0}}}, "workspace.bash.timeout_seconds"),
])
def test_yaml_volumes_are_checked(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_config(config)


async def test_an_agentdef_written_through_the_tool_cannot_widen_volume_def_scopes(open_runtime: Any) -> None:
    from tests.support.workspace import AGENTS

    rt, _d = await open_runtime(AGENTS, config=CONFIG)
    author = AgentConfig(tools=["AgentDef"], agent_def_scopes=["any"])
    ctx = rt.tool_context(new_id("t"), new_id("run"), "author", agent_config=author)
    tool = rt.registry.get("AgentDef")
    assert tool is not None
    with pytest.raises(ToolError, match="volume_def_scopes"):
        await tool.invoke(ctx, {"op": "create", "name": "sub", "overlay": {"model": "echo",
                                                                          "volume_def_scopes": ["any"]}})


async def test_an_agentdef_written_through_the_tool_cannot_widen_its_authors_volumes(open_runtime: Any) -> None:
    from tests.support.workspace import AGENTS

    rt, _d = await open_runtime(AGENTS, config=CONFIG)
    author = AgentConfig(tools=["AgentDef"], agent_def_scopes=["any"],
                         volumes=[{"name": "work"}, {"name": "shared", "mode": "ro"}])  # type: ignore[list-item]
    ctx = rt.tool_context(new_id("t"), new_id("run"), "author", agent_config=author)
    tool = rt.registry.get("AgentDef")
    assert tool is not None
    for widened in ([{"name": "refs"}], ["shared"], [{"name": "shared", "mode": "rw"}]):
        with pytest.raises(ToolError, match="volumes"):
            await tool.invoke(ctx, {"op": "create", "name": "sub", "overlay": {"model": "echo", "volumes": widened}})
    ok = await tool.invoke(ctx, {"op": "create", "name": "sub", "overlay": {
        "model": "echo", "volumes": ["work", {"name": "shared", "mode": "ro"}]}})
    assert not getattr(ok, "is_error", True)


async def test_volumedef_over_http(open_runtime: Any, tmp_path: Path) -> None:
    from tests.support.substrate import client_for
    from tests.support.workspace import AGENTS

    rt, _d = await open_runtime(AGENTS, config=CONFIG)
    rt.volumes.storage = HostDirStorage(tmp_path / "volumes")
    async with client_for(rt) as c:
        resp = await c.post("/v1/_volumedef", json={"op": "create", "name": "shared-docs", "mode": "ro"})
        assert resp.status_code == 200, resp.text
        assert resp.json()["body"] == {"mode": "ro", "ephemeral": False}
        names = (await c.get("/v1/_volumedef/names")).json()["names"]
        assert "shared-docs" in names and "work" in names
        bad = await c.post("/v1/_volumedef", json={"op": "create", "name": "../etc", "mode": "rw"})
        assert bad.status_code == 422 and bad.json()["code"] == "tool_refused"
