"""The Path tree (issue 41 item 2) through runs with the mock model: names given by Memory.set
`path` and VolumeDef, implicit directories, mkdir/mv/rm, the grammar, and trees kept apart by
scope and tenant."""

from __future__ import annotations

from typing import Any

from tests.support.substrate import ok_results, run_agent, scripted, tool_results


def p(op: str, **kw: Any) -> tuple[str, dict[str, Any]]:
    return ("Path", {"op": op, **kw})


def mem(op: str, **kw: Any) -> tuple[str, dict[str, Any]]:
    return ("Memory", {"op": op, "scope": "agent", **kw})


async def test_names_directories_moves_and_removals(open_rt: Any) -> None:
    agent = scripted(
        mem("set", key="k1", value={"v": 1}, path="/notes/today"),
        p("ls", path="/"),
        p("ls", path="/notes"),
        p("stat", path="/notes/today"),
        p("mkdir", path="/empty"),
        p("mkdir", path="/notes"),  # implied by /notes/today: nothing to create
        p("mv", path="/notes", to="/archive/notes"),  # an implied directory moves with its subtree
        p("resolve", path="/archive/notes/today"),
        mem("get", path="/archive/notes/today"),
        p("ls", path="/", recursive=True),
        p("rm", path="/archive"),
        p("rm", path="/archive", recursive=True),
        p("ls", path="/"),
        memory_scopes=["agent"],
    )
    rt, disp = await open_rt({"agents": {"librarian": agent}})
    (s, root, notes, stat, mk, mk2, mv, res, got, rec, refused, rm, after) = await tool_results(
        rt, (await run_agent(rt, disp, "librarian")).id
    )
    assert s == (False, {"ok": True, "key": "k1", "scope": "agent", "path": "/notes/today"})
    assert root[1] == {"path": "/", "entries": [{"name": "notes", "kind": "directory", "full_path": "/notes"}]}
    ref = {"scope": "agent", "scope_id": "librarian", "key": "k1", "facet": "kv"}
    assert notes[1]["entries"] == [
        {"name": "today", "kind": "memory_entry", "full_path": "/notes/today", "resource_ref": ref}
    ]
    assert stat[1]["kind"] == "memory_entry" and stat[1]["scope"] == "agent" and stat[1]["resource_ref"] == ref
    assert mk[1] == {"ok": True, "path": "/empty", "created": True}
    assert mk2[1]["created"] is False and "implied" in mk2[1]["note"]
    assert mv[1] == {"ok": True, "from": "/notes", "to": "/archive/notes"}
    assert res[1]["full_path"] == "/archive/notes/today" and res[1]["resource_ref"] == ref
    assert got[1] == {"found": True, "key": "k1", "value": {"v": 1}}
    assert [e["full_path"] for e in rec[1]["entries"]] == ["/empty", "/archive/notes/today"]
    assert refused[0] and "path_not_empty" in refused[1] and "recursive:true" in refused[1]
    assert rm[1] == {"ok": True, "removed": "/archive", "n_removed": 1}
    assert after[1]["entries"] == [{"name": "empty", "kind": "directory", "full_path": "/empty"}]
    # the name went, the entry stayed
    assert (await rt.memory.get("default", "agent", "librarian", "k1")) == (True, {"v": 1})


async def test_the_grammar_and_the_fields_are_refused_by_name(open_rt: Any) -> None:
    agent = scripted(
        p("resolve", path="/docs/../etc"),
        p("ls", path="docs"),
        p("mkdir", path="/a b"),
        p("ls", path="/", colour="red"),
        p("stat", path="/x", to="/y"),
        p("rm", path="/x", resource_too=True),
        p("stat", path="/nothing"),
        p("mkdir", path="/"),
        p("mv", path="/a", to="/a/b"),
        p("chmod", path="/a"),
        p("ls", path="/", scope="user"),  # the run has no user
        mem("delete", key="k", path="/k"),
        memory_scopes=["agent"],
    )
    rt, disp = await open_rt({"agents": {"a": agent}})
    results = await tool_results(rt, (await run_agent(rt, disp, "a")).id)
    codes = [
        "invalid_path",
        "invalid_path",
        "invalid_path",
        "unknown field",
        "to applies to mv only",
        "resource_too_unsupported",
        "no_such_path",
        "invalid_path",
        "invalid_path",
        "invalid_input",
        "user_id",
        "path applies to set and get only",
    ]
    for (err, text), code in zip(results, codes, strict=True):
        assert err and code in text, (code, text)


async def test_mkdir_and_naming_never_clobber(open_rt: Any) -> None:
    agent = scripted(
        mem("set", key="k", value=1, path="/k"),
        p("mkdir", path="/k"),  # a memory entry is there
        p("mkdir", path="/d"),
        mem("set", key="k2", value=2, path="/d"),  # a directory is there: refused, the set rolled back
        p("mv", path="/k", to="/d"),
        memory_scopes=["agent"],
    )
    rt, disp = await open_rt({"agents": {"a": agent}})
    _, mk, _, clobber, mv = await tool_results(rt, (await run_agent(rt, disp, "a")).id)
    assert mk[0] and "path_exists" in mk[1]
    assert clobber[0] and "path_exists" in clobber[1] and "directory" in clobber[1]
    assert await rt.memory.get("default", "agent", "a", "k2") == (False, None)
    assert mv[0] and "destination already exists" in mv[1]


async def test_trees_are_apart_by_scope_agent_user_and_tenant(open_rt: Any) -> None:
    writer = scripted(
        p("mkdir", path="/mine"), p("mkdir", path="/ours", scope="tenant"), p("mkdir", path="/u", scope="user")
    )
    reader = scripted(p("ls", path="/"), p("ls", path="/", scope="tenant"), p("ls", path="/", scope="user"))
    rt, disp = await open_rt({"agents": {"w": writer, "r": reader}})
    await ok_results(rt, (await run_agent(rt, disp, "w", user_id="alice")).id)
    own, tenant, user = await ok_results(rt, (await run_agent(rt, disp, "r", user_id="alice")).id)
    assert own["entries"] == []  # another agent's tree
    assert [e["name"] for e in tenant["entries"]] == ["ours"]
    assert [e["name"] for e in user["entries"]] == ["u"]
    _, _, bob = await ok_results(rt, (await run_agent(rt, disp, "r", user_id="bob")).id)
    assert bob["entries"] == []
    elsewhere = await ok_results(
        rt, (await run_agent(rt, disp, "r", tenant="other", user_id="alice")).id, tenant="other"
    )
    assert all(r["entries"] == [] for r in elsewhere)


async def test_a_created_volume_is_mounted_in_the_tenant_tree(open_rt: Any, tmp_path: Any) -> None:
    agent = scripted(
        ("VolumeDef", {"op": "create", "name": "repo", "mode": "ro"}),
        ("VolumeDef", {"op": "create", "name": "data", "mount_at": "/vol/shared/data"}),
        ("VolumeDef", {"op": "get", "name": "repo", "mount_at": "/x"}),
        p("ls", path="/vol", scope="tenant", recursive=True),
        volume_def_scopes=["any"],
    )
    rt, disp = await open_rt({"agents": {"a": agent}}, volumes_root=tmp_path)
    repo, data, wrong, ls = await tool_results(rt, (await run_agent(rt, disp, "a")).id)
    assert repo[1]["mount_at"] == "/vol/repo" and data[1]["mount_at"] == "/vol/shared/data"
    assert wrong[0] and "mount_at applies to create only" in wrong[1]
    assert ls[1]["entries"] == [
        {
            "name": "repo",
            "kind": "volume_mount",
            "full_path": "/vol/repo",
            "resource_ref": {"volume_name": "repo", "mode": "ro"},
        },
        {
            "name": "data",
            "kind": "volume_mount",
            "full_path": "/vol/shared/data",
            "resource_ref": {"volume_name": "data", "mode": "rw"},
        },
    ]


async def test_erasing_a_user_takes_their_tree(open_rt: Any) -> None:
    from treadle.store.erasure import SubjectErasure

    agent = scripted(p("mkdir", path="/mine", scope="user"), p("mkdir", path="/kept", scope="tenant"))
    rt, disp = await open_rt({"agents": {"a": agent}})
    await ok_results(rt, (await run_agent(rt, disp, "a", user_id="alice")).id)
    receipt = await SubjectErasure(rt.pool).erase("default", "alice", dry_run=False)
    assert receipt["deleted"]["dirents"] == 1
    lister = scripted(p("ls", scope="user"), p("ls", scope="tenant"))
    rt2, disp2 = await open_rt({"agents": {"l": lister}})
    user, tenant = await ok_results(rt2, (await run_agent(rt2, disp2, "l", user_id="alice")).id)
    assert user["entries"] == [] and [e["name"] for e in tenant["entries"]] == ["kept"]
