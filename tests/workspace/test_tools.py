"""Each file tool's happy path and refusals, on both Volume adapters (host directory, S3 on moto)."""

from __future__ import annotations

import json

import pytest

from tests.support.workspace import Caller
from treadle.errors import ToolError
from treadle.runtime import Runtime


async def test_write_read_numbered_lines_offset_limit(ws: Runtime) -> None:
    call = Caller(ws)
    r = await call("Write", {"path": "src/app.py", "content": "one\ntwo\nthree\nfour\n"})
    assert not r.is_error and "created src/app.py (19 bytes)" in r.content
    r = await call("Read", {"path": "src/app.py"})
    assert r.content == "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour"
    r = await call("Read", {"path": "./src/../src/app.py", "offset": 2, "limit": 2})
    assert r.content.startswith("     2\ttwo\n     3\tthree\n[lines 2-3 of 4")
    r = await call("Write", {"path": "src/app.py", "content": ""})
    assert "overwrote" in r.content
    assert "is empty" in (await call("Read", {"path": "src/app.py"})).content
    with pytest.raises(ToolError, match="not found"):
        await call("Read", {"path": "missing.txt"})


async def test_edit_unique_ambiguous_replace_all(ws: Runtime) -> None:
    call = Caller(ws)
    await call("Write", {"path": "a.txt", "content": "x = 1\ny = 1\nz = 2\n"})
    with pytest.raises(ToolError, match="occurs 2 times"):
        await call("Edit", {"path": "a.txt", "old_string": "= 1", "new_string": "= 3"})
    with pytest.raises(ToolError, match="not found"):
        await call("Edit", {"path": "a.txt", "old_string": "w = 9", "new_string": "w = 0"})
    with pytest.raises(ToolError, match="must differ"):
        await call("Edit", {"path": "a.txt", "old_string": "z", "new_string": "z"})
    r = await call("Edit", {"path": "a.txt", "old_string": "z = 2", "new_string": "z = 20"})
    assert r.content == "edited a.txt (1 replacement)"
    r = await call("Edit", {"path": "a.txt", "old_string": "= 1", "new_string": "= 3", "replace_all": True})
    assert r.content == "edited a.txt (2 replacements)"
    assert "x = 3\n" in (await call("Read", {"path": "a.txt"})).content.replace("     1\t", "")
    with pytest.raises(ToolError, match="does not exist"):
        await call("Edit", {"path": "nope.txt", "old_string": "a", "new_string": "b"})


async def test_a_rerun_of_the_same_call_is_not_applied_twice(ws: Runtime) -> None:
    call = Caller(ws)
    await call("Write", {"path": "log.txt", "content": "foo\n"})
    edit = {"path": "log.txt", "old_string": "foo", "new_string": "foo bar", "replace_all": True}
    first = await call("Edit", edit, tool_use_id="toolu_same")
    again = await call("Edit", edit, tool_use_id="toolu_same")  # the engine re-running it after a crash
    assert again.content == first.content and not again.is_error
    assert (await call("Read", {"path": "log.txt"})).content == "     1\tfoo bar"
    # the same input under another tool_use_id is a new call: applied again
    await call("Edit", edit, tool_use_id="toolu_other")
    assert (await call("Read", {"path": "log.txt"})).content == "     1\tfoo bar bar"


async def test_grep_modes_context_glob_filter(ws: Runtime) -> None:
    call = Caller(ws)
    await call("Write", {"path": "src/a.py", "content": "import os\nTODO: one\nx = 1\n"})
    await call("Write", {"path": "src/b.py", "content": "todo: two\nTODO: three\n"})
    await call("Write", {"path": "docs/c.md", "content": "TODO: doc\n"})
    r = await call("Grep", {"pattern": "TODO"})
    assert r.content.splitlines() == ["docs/c.md", "src/a.py", "src/b.py"]
    r = await call("Grep", {"pattern": "todo", "case_insensitive": True, "output_mode": "count", "glob": "*.py"})
    assert r.content.splitlines() == ["src/a.py:1", "src/b.py:2"]
    r = await call("Grep", {"pattern": "TODO", "path": "src", "output_mode": "content", "-B": 1})
    assert r.content.splitlines() == ["src/a.py-1-import os", "src/a.py:2:TODO: one", "src/b.py-1-todo: two",
                                      "src/b.py:2:TODO: three"]
    r = await call("Grep", {"pattern": "one.x", "multiline": True, "output_mode": "content"})
    assert r.content == "src/a.py:2:TODO: one"
    assert (await call("Grep", {"pattern": "nothing-here"})).content == "no matches"
    r = await call("Grep", {"pattern": "TODO", "head_limit": 1})
    assert r.content.splitlines()[0] == "docs/c.md" and "truncated" in r.content
    with pytest.raises(ToolError, match="invalid regex"):
        await call("Grep", {"pattern": "("})
    with pytest.raises(ToolError, match="output_mode"):
        await call("Grep", {"pattern": "x", "output_mode": "lines"})


async def test_grep_stops_a_pattern_that_backtracks_forever(ws: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    from treadle.builtins.files import search

    monkeypatch.setattr(search, "GREP_MATCH_SECONDS", 0.5)
    call = Caller(ws)
    await call("Write", {"path": "evil.txt", "content": "a" * 40 + "!\n"})
    with pytest.raises(ToolError, match="took longer") as exc:
        await call("Grep", {"pattern": "(a|aa)+$"})
    assert exc.value.code == "grep_timeout"


async def test_glob_doublestar_and_subpath(ws: Runtime) -> None:
    call = Caller(ws)
    for p in ("src/a.py", "src/pkg/b.py", "src/pkg/c.txt", "top.py"):
        await call("Write", {"path": p, "content": p})
    r = await call("Glob", {"pattern": "**/*.py"})
    assert sorted(r.content.splitlines()) == ["src/a.py", "src/pkg/b.py", "top.py"]
    r = await call("Glob", {"pattern": "*.py", "path": "src"})
    assert r.content.splitlines() == ["src/a.py"]
    assert (await call("Glob", {"pattern": "*.rs"})).content == "no matches"
    with pytest.raises(ToolError, match="no leading /"):
        await call("Glob", {"pattern": "/etc/*"})


NOTEBOOK = {"cells": [{"cell_type": "markdown", "id": "m1", "metadata": {}, "source": ["# Title"]},
                      {"cell_type": "code", "id": "c1", "metadata": {"x": 1}, "source": ["print(1)"],
                       "outputs": [], "execution_count": None}],
            "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}


async def test_notebook_edit_replace_insert_delete(ws: Runtime) -> None:
    call = Caller(ws)
    await call("Write", {"path": "nb.ipynb", "content": json.dumps(NOTEBOOK)})
    await call("NotebookEdit", {"file_path": "nb.ipynb", "cell_id": "c1", "source": "print(2)\nprint(3)"})
    r = await call("NotebookEdit", {"file_path": "nb.ipynb", "cell_id": "m1", "mode": "insert", "source": "x = 1"},
                   tool_use_id="toolu_nb_insert")
    assert "new cell id" in r.content
    await call("NotebookEdit", {"file_path": "nb.ipynb", "cell_id": "m1", "mode": "delete"})
    nb = json.loads("".join(line.split("\t", 1)[1] + "\n"
                            for line in (await call("Read", {"path": "nb.ipynb"})).content.splitlines()))
    assert [c["cell_type"] for c in nb["cells"]] == ["code", "code"]
    assert nb["cells"][0]["outputs"] == [] and nb["cells"][0]["source"] == ["x = 1"]
    assert nb["cells"][1]["source"] == ["print(2)\n", "print(3)"] and nb["cells"][1]["metadata"] == {"x": 1}
    assert nb["metadata"] == NOTEBOOK["metadata"]
    with pytest.raises(ToolError, match="not found"):
        await call("NotebookEdit", {"file_path": "nb.ipynb", "cell_id": "zz", "source": "y"})
    with pytest.raises(ToolError, match=r"\.ipynb"):
        await call("NotebookEdit", {"file_path": "nb.txt", "cell_id": "c1", "source": "y"})


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "~/x", "a/../../b", "a\\b", "", "x\x00y"])
async def test_paths_that_leave_the_volume_are_refused(ws: Runtime, path: str) -> None:
    call = Caller(ws)
    with pytest.raises(ToolError) as exc:
        await call("Write", {"path": path, "content": "x"})
    assert exc.value.code == "path_refused"
    with pytest.raises(ToolError):
        await call("Read", {"path": path})


async def test_read_only_volumes_and_bindings_refuse_writes(ws: Runtime) -> None:
    call = Caller(ws)
    with pytest.raises(ToolError, match="read-only") as exc:
        await call("Write", {"path": "x.txt", "content": "x", "volume": "refs"})
    assert exc.value.code == "volume_refused"
    await call("Write", {"path": "x.txt", "content": "hello"})
    reader = Caller(ws, "reader", tenant=call.tenant)  # binds rw `work` as ro
    assert (await reader("Read", {"path": "x.txt"})).content == "     1\thello"
    for tool, args in (("Write", {"path": "x.txt", "content": "y"}),
                       ("Edit", {"path": "x.txt", "old_string": "hello", "new_string": "bye"})):
        with pytest.raises(ToolError, match="read-only"):
            await reader(tool, args)
    with pytest.raises(ToolError, match="bound to no volume"):
        await Caller(ws, "nobody")("Read", {"path": "x.txt"})
    with pytest.raises(ToolError, match="not one of yours"):
        await call("Read", {"path": "x.txt", "volume": "elsewhere"})


async def test_size_caps(ws: Runtime) -> None:
    call = Caller(ws)
    cap = ws.config.workspace.write_max_bytes
    with pytest.raises(ToolError, match="exceeds") as exc:
        await call("Write", {"path": "big.txt", "content": "x" * (cap + 1)})
    assert exc.value.code == "file_too_large"
    line = "y" * 99 + "\n"
    await call("Write", {"path": "big.txt", "content": line * (cap // 100)})
    r = await call("Read", {"path": "big.txt", "limit": 5000})
    assert f"only the first {ws.config.workspace.read_max_bytes} bytes were read" in r.content
    with pytest.raises(ToolError, match="over the limit"):
        await call("Edit", {"path": "big.txt", "old_string": "y" * 99 + "\n", "new_string": "z" * 200,
                            "replace_all": True})


async def test_tenants_have_separate_copies_of_a_volume(ws: Runtime) -> None:
    a, b = Caller(ws), Caller(ws)
    await a("Write", {"path": "secret.txt", "content": "tenant a"})
    with pytest.raises(ToolError, match="not found"):
        await b("Read", {"path": "secret.txt"})
    assert (await b("Grep", {"pattern": "tenant"})).content == "no matches"


async def test_context_self_reports_volumes(ws: Runtime) -> None:
    r = await Caller(ws)("Context", {"op": "self"})
    vols = json.loads(r.content)["volumes"]
    assert vols["bindings"] == [
        {"name": "work", "mode": "rw", "ephemeral": False, "default": True, "source": "yaml"},
        {"name": "refs", "mode": "ro", "ephemeral": False, "default": False, "source": "yaml"},
        {"name": "scratch", "mode": "rw", "ephemeral": True, "default": False, "source": "yaml"},
    ]
    assert vols["storage"] == ws.volumes.storage.kind if ws.volumes.storage else False
    assert "relative to the volume root" in vols["paths"]
    r = await Caller(ws, "nobody")("Context", {"op": "self"})
    assert json.loads(r.content)["volumes"]["filesystem"] == "none — no volume bound"


async def test_the_journal_of_an_ended_run_is_dropped(ws: Runtime) -> None:
    call = Caller(ws)
    await call("Write", {"path": "j.txt", "content": "x"}, tool_use_id="toolu_j")
    loc = (await ws.volumes.open(call.tenant, call.run_id, ws.catalogue.static["coder"].config, None,
                                 write=False)).location
    assert await ws.volumes.store.effect(call.run_id, "toolu_j", loc, "j.txt") is not None
    await ws.volumes.run_ended(call.run_id)  # what the engine calls after the run's last commit
    assert await ws.volumes.store.effect(call.run_id, "toolu_j", loc, "j.txt") is None


async def test_two_edits_of_one_file_in_one_turn_both_land(ws: Runtime) -> None:
    import asyncio

    call = Caller(ws)
    await call("Write", {"path": "t.txt", "content": "a\nb\nc\nd\n"})
    results = await asyncio.gather(*(call("Edit", {"path": "t.txt", "old_string": f"{x}\n", "new_string": f"{x}!\n"})
                                     for x in "abcd"))  # a turn's external calls run concurrently
    assert all(not r.is_error for r in results)
    assert (await call("Read", {"path": "t.txt"})).content.replace(" ", "") == "1\ta!\n2\tb!\n3\tc!\n4\td!"


async def test_text_that_is_not_unicode_is_refused(ws: Runtime) -> None:
    with pytest.raises(ToolError, match="not valid Unicode"):
        await Caller(ws)("Write", {"path": "s.txt", "content": "bad \ud800 surrogate"})


async def test_a_path_through_a_file_is_not_found(ws: Runtime) -> None:
    call = Caller(ws)
    await call("Write", {"path": "plain.txt", "content": "x"})
    with pytest.raises(ToolError, match="not found"):
        await call("Read", {"path": "plain.txt/inner"})
    if ws.volumes.storage is not None and ws.volumes.storage.kind == "host":  # S3 keys may nest under a file's
        with pytest.raises(ToolError, match="is a file"):
            await call("Write", {"path": "plain.txt/inner", "content": "y"})
