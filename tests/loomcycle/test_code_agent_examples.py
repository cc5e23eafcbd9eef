"""loomcycle's own configs that use code agents (issue 35's done-when): every yaml of its repository
with a `provider: code-js` agent, loaded by treadle unchanged, and the code agents of those that
load run against treadle with loomcycle's own checks (its test/runtime/*/run.sh) and the mock —
no model is called by a code agent.

loomcycle's files are not copied here: set TREADLE_LOOMCYCLE_SRC to a checkout of its repository
(`git clone https://github.com/denn-gubsky/loomcycle`; without it the tests skip). At its commit
4292f35 there are 10 such configs (three bundles, each also embedded under cmd/loomcycle, two
examples and two runtime suites): all 10 load unchanged and run — the runtime suites, doc-colorizer,
dev-exec, exp9-static up to its first SQLite-only statement, exp10 in its run.sh layout (its
Bashbox half ends `bashbox_unavailable`), and the memory bundle's consolidation pass
(tests/loomcycle/test_memory_bundle.py) —
`test_every_code_agent_config_loads_or_names_a_key_that_is_not_a_code_agents`."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml

from treadle.config import parse_config
from treadle.errors import ConfigError
from treadle.runtime import Runtime
from treadle.store.runs import NewRun
from treadle.testing import open_test_runtime, user_text

pytest.importorskip("quickjs")

TENANT = f"t_lcex_{secrets.token_hex(4)}"
#: loomcycle's configs with code agents (at 4292f35) → whether treadle loads them
CONFIGS = {
    "bundles/dev-exec/loomcycle.yaml": True,
    "bundles/doc-colorizer/loomcycle.yaml": True,
    "bundles/memory/loomcycle.yaml": True,
    "cmd/loomcycle/embedded/bundles/dev-exec.yaml": True,
    "cmd/loomcycle/embedded/bundles/doc-colorizer.yaml": True,
    "cmd/loomcycle/embedded/bundles/memory.yaml": True,
    "examples/exp10-gbash-bench/loomcycle.yaml": True,
    "examples/exp9-prime-sql-memory-static/loomcycle.yaml": True,
    "test/runtime/code-js-stress/loomcycle.yaml": True,
    "test/runtime/code-js/loomcycle.yaml": True,
}


def _src() -> Path:
    src = os.environ.get("TREADLE_LOOMCYCLE_SRC")
    if not src or not (Path(src) / "internal" / "providers" / "codejs").is_dir():
        pytest.skip("needs TREADLE_LOOMCYCLE_SRC: a checkout of loomcycle's repository")
    return Path(src)


def _code_agent_configs(root: Path) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(root.rglob("*.y*ml")):
        if ".git" in path.parts or "node_modules" in path.parts:
            continue
        try:
            data = yaml.safe_load(path.read_text())
        except (yaml.YAMLError, UnicodeDecodeError):  # loomcycle's preset tags (!prepend): no code agents
            continue
        agents = data.get("agents") if isinstance(data, dict) else None
        if isinstance(agents, dict) and any(isinstance(a, dict) and a.get("provider") == "code-js"
                                            for a in agents.values()):
            found[str(path.relative_to(root))] = data
    return found


def _with_code_agents(root: Path, rel: str, data: dict[str, Any], **limits: Any) -> dict[str, Any]:
    """The yaml as it is, with loomcycle's LOOMCYCLE_CODE_AGENTS_ENABLED / _ROOT as treadle's switch."""
    return {**data, "code_agents": {"enabled": True, "root": str((root / rel).parent / "agent_code"), **limits}}


def test_every_code_agent_config_loads_or_names_a_key_that_is_not_a_code_agents(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _src()
    (tmp_path / "work").mkdir()
    (tmp_path / "dynamic").mkdir()
    monkeypatch.chdir(tmp_path / "work")  # the examples' run.sh layout: cwd = work/, with a sibling dynamic/
    found = _code_agent_configs(root)
    assert sorted(found) == sorted(CONFIGS), sorted(found)
    loads: dict[str, bool] = {}
    for rel, data in found.items():
        try:
            if "bundles" in rel:  # a bundle loads over loomcycle's base preset (its tiers), as loomcycle layers it
                base = yaml.safe_load((root / "cmd/loomcycle/embedded/presets/base.yaml").read_text())
                data = {**base, **data}
            parse_config(_with_code_agents(root, rel, data))
            loads[rel] = True
        except ConfigError as exc:
            loads[rel] = False
            lines = [line for line in str(exc).splitlines() if "treadle.yaml:" in line]
            assert lines, str(exc)
            code_keys = ("code", "provider", "run_timeout", "code-js")
            about_code = [line for line in lines if any(k in line.split(":")[1] for k in code_keys)]
            assert not about_code, f"{rel}: {about_code}"
    assert loads == CONFIGS


@pytest.fixture
async def runtime_of(db_url: str, tmp_path: Path) -> AsyncIterator[Any]:
    async with AsyncExitStack() as stack:

        async def open_rt(rel: str, extra: dict[str, Any] | None = None, **limits: Any) -> tuple[Runtime, Any]:
            root = _src()
            data = {**_with_code_agents(root, rel, yaml.safe_load((root / rel).read_text()), **limits),
                    **(extra or {})}
            data = {k: v for k, v in data.items() if v is not None}  # `extra` drops a key with None
            agents = data.pop("agents")
            return await stack.enter_async_context(open_test_runtime(
                agents, database_url=db_url, config=data, home=tmp_path, workers=1))

        yield open_rt


async def _run(rt: Runtime, disp: Any, agent: str, prompt: str, user: str = "codejs-user") -> tuple[Any, str]:
    run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent=agent, segments=user_text(prompt), user_id=user))
    await disp.drain()
    done = await rt.runs.get(TENANT, run.id)
    events = await rt.runs.events(TENANT, run.id)
    return done, "".join(e.payload.get("text", "") for e in events if e.type == "text")


async def test_kvflow_round_trips_memory_as_loomcyclesruntime_suite_checks(runtime_of: Any) -> None:
    """test/runtime/code-js/run.sh: run 1 writes and reads back, run 2 sees the counter advance."""
    rt, disp = await runtime_of("test/runtime/code-js/loomcycle.yaml")
    run1, text1 = await _run(rt, disp, "kvflow", "go")
    assert run1.status == "completed" and run1.stop_reason == "end_turn", run1
    assert text1 == "color=purple count=1 user_keys=1", text1
    run2, text2 = await _run(rt, disp, "kvflow", "go")
    assert run2.status == "completed" and "count=2" in text2, text2


async def test_the_stress_suite_counter_overrun_and_runaway(runtime_of: Any) -> None:
    """test/runtime/code-js-stress/run.sh: concurrent counters lose no increment, 25 sequential
    calls pass the iteration cap, and the runaway loop is ended by the whole-run budget."""
    rt, disp = await runtime_of("test/runtime/code-js-stress/loomcycle.yaml")
    ids = []
    for _ in range(4):
        run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="counter", segments=user_text("go")))
        ids.append(run.id)
    await disp.drain()  # the four runs' steps interleave on the queue
    for rid in ids:
        done = await rt.runs.get(TENANT, rid)
        assert done is not None and done.status == "completed", done
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT value FROM memory WHERE tenant_id = %s AND scope_id = 'counter' AND key = 'n'",
                                 (TENANT,))
        row = await cur.fetchone()
    assert row is not None and json.loads(json.dumps(row["value"])) in (32, "32"), row
    overrun, text = await _run(rt, disp, "overrun", "go")
    assert overrun.status == "completed" and text == "completed 25 sequential calls (no iteration cap)"
    run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="runaway", segments=user_text("go")))
    with pytest.raises(RuntimeError, match="more than 30 deliveries"):
        await disp.drain(max_steps=30)  # it would loop for ever
    async with rt.pool.connection() as conn:  # …until its 120 s budget has passed
        await conn.execute("UPDATE runs SET created_at = created_at - interval '121 seconds' WHERE id = %s",
                           (run.id,))
    await disp.drain()
    done = await rt.runs.get(TENANT, run.id)
    assert done is not None and done.status == "failed" and done.error is not None, done
    assert done.error["code"] == "code_agent_timeout", done.error


@pytest.mark.parametrize("rel", ["bundles/doc-colorizer/loomcycle.yaml",
                                 "cmd/loomcycle/embedded/bundles/doc-colorizer.yaml"])
async def test_the_doc_colorizer_bundle_stamps_every_document_under_a_subtree(runtime_of: Any, rel: str) -> None:
    """The bundle's code agent (Path ls → Document get_document/get_chunk → update_chunk) run on
    treadle's Path and Document: both documents under /loomcycle/rfcs get the color fields, the one
    elsewhere does not, and a field already on a chunk is kept."""
    from treadle.builtins.document import document_op
    from treadle.store.dirents import DirentStore, Tree

    rt, disp = await runtime_of(rel)
    user = f"u_{secrets.token_hex(3)}"
    tree = Tree(TENANT, "user", user)

    async def doc(**args: Any) -> Any:
        return await document_op(DirentStore(rt.pool), tree, args, user)

    made = [await doc(op="create_document", title=t, path=p)
            for t, p in (("A", "/loomcycle/rfcs/a"), ("B", "/loomcycle/rfcs/deeper/b"), ("C", "/elsewhere/c"))]
    roots = [(await doc(op="get_document", id=m["document_id"]))["root_chunk_id"] for m in made]
    first = await doc(op="get_chunk", id=roots[0])
    await doc(op="update_chunk", id=roots[0], revision=first["revision"], fields={"owner": "ops"})
    run, text = await _run(rt, disp, "doc/colorizer", "", user=user)
    assert run.status == "completed", (run, text)
    assert text.startswith("colored 2 / skipped ") and "failed 0 under /loomcycle/rfcs" in text, text
    fields = [(await doc(op="get_chunk", id=r)).get("fields") or {} for r in roots]
    assert fields[0]["owner"] == "ops" and fields[0]["color_enabled"] is True
    assert fields[1]["color_enabled"] is True and fields[1]["color_scheme"]["doc.plan"] == "#3a9ad6"
    assert "color_enabled" not in fields[2]


def fake_sandbox(calls: list[tuple[str, dict[str, Any]]]) -> Any:
    """An MCP server named like loomcycle's sandbox bundle's (sandbox_open/write/exec/read/close)
    that runs nothing: `exec` answers `ran: <command>`, `read` what `write` stored."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("sandbox")
    files: dict[str, str] = {}

    @server.tool()
    def sandbox_open(network: str = "egress", workspace: str | None = None) -> dict[str, Any]:
        """Open a session."""
        calls.append(("open", {"network": network}))
        return {"session_id": "sb-1"}

    @server.tool()
    def sandbox_write(session_id: str, path: str, content: str, encoding: str = "utf8") -> str:
        """Write a file."""
        calls.append(("write", {"path": path}))
        files[path] = content
        return "wrote " + path

    @server.tool()
    def sandbox_exec(session_id: str, command: str, timeout_seconds: int | None = None,
                     max_output_bytes: int | None = None) -> str:
        """Run a command."""
        calls.append(("exec", {"command": command}))
        if command.startswith("false"):
            raise ValueError("exit status 1")
        return "ran: " + command

    @server.tool()
    def sandbox_read(session_id: str, path: str, encoding: str | None = None) -> str:
        """Read a file."""
        calls.append(("read", {"path": path}))
        return files[path]

    @server.tool()
    def sandbox_close(session_id: str) -> str:
        """Close the session."""
        calls.append(("close", {"session_id": session_id}))
        return "closed"

    return server


@pytest.mark.parametrize("rel", ["bundles/dev-exec/loomcycle.yaml", "cmd/loomcycle/embedded/bundles/dev-exec.yaml"])
async def test_the_dev_exec_bundle_drives_a_sandbox_mcp_server(
        runtime_of: Any, rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundle's code agent (mcp__sandbox__* as JavaScript functions) against a fake sandbox MCP
    server on loopback: open, write, the commands in order (a failing one stops the rest), the
    read, close — and its report as the final text. No browser server: its steps degrade."""
    from tests.support.mcp_servers import serve_http

    monkeypatch.setenv("TREADLE_HTTP_ALLOWED_HOSTS", "127.0.0.1")  # the loopback server, and only it
    monkeypatch.setenv("TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST", "127.0.0.1")
    calls: list[tuple[str, dict[str, Any]]] = []
    async with serve_http(fake_sandbox(calls)) as url:
        rt, disp = await runtime_of(rel, {"mcp_servers": {"sandbox": {"transport": "http", "url": url}}})
        envelope = {"files": [{"path": "hello.txt", "content": "hi there"}],
                    "commands": ["go build ./...", "false && echo", "never"], "read": ["hello.txt"],
                    "git_setup": False, "browser": [{"op": "navigate", "args": {"url": "http://x"}}]}
        run, text = await _run(rt, disp, "dev/exec", json.dumps(envelope))
    assert run.status == "completed", (run, text)
    assert [c[0] for c in calls] == ["open", "write", "exec", "exec", "read", "close"], calls
    assert text.startswith("ran 3 command(s): 1 ok, 1 failed, 1 skipped; session sb-1 (closed)"), text
    # the failing command: the tool error thrown into the code, caught there
    assert "ran: go build ./..." in text and "Error executing tool sandbox_exec" in text, text
    assert "# read hello.txt (8 bytes)\nhi there" in text and "needs an mcp__browser__* server" in text, text


async def test_exp9_static_runs_to_its_first_sqlite_statement(
        runtime_of: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/exp9-prime-sql-memory-static as it is (its `storage: {sqlmem_enabled: true}` turns on
    treadle's SQL Memory), with LOOMCYCLE_BASH_ENABLED of its run.sh as treadle spells it
    (`workspace.bash.enabled`), in run.sh's directory layout (cwd = the `default` volume, path ".").
    The code agent runs primes.py with Bash and creates its table, then stops where loomcycle's SQL
    Memory (SQLite) and treadle's (PostgreSQL) differ: `INSERT OR IGNORE … datetime('now')` is
    SQLite's dialect — not the code agent — and the error, thrown into the code, ends the run
    `code_agent_threw` as loomcycle's would on an error there."""
    import shutil

    src = _src() / "examples" / "exp9-prime-sql-memory-static"
    here = tmp_path / "exp9"
    (here / "work").mkdir(parents=True)
    shutil.copy(src / "primes.py", here / "primes.py")
    monkeypatch.chdir(here / "work")  # run.sh: cd "$HERE/work"
    rt, disp = await runtime_of("examples/exp9-prime-sql-memory-static/loomcycle.yaml",
                                {"workspace": {"bash": {"enabled": True}}})
    run, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="exp9-static-coder", segments=user_text("go"),
                                       user_id="exp9"))
    await disp.drain()
    done = await rt.runs.get(TENANT, run.id)
    assert done is not None and done.status == "failed" and done.error is not None, done
    assert done.error["code"] == "code_agent_threw" and "sql_error: syntax error" in done.error["error"], done.error
    results = [e.payload for e in await rt.runs.events(TENANT, run.id) if e.type == "tool_result"]
    calls = [e.payload["tool_use"]["input"] for e in await rt.runs.events(TENANT, run.id) if e.type == "tool_call"]
    assert [r.get("is_error", False) for r in results] == [False, False, True], results
    assert results[0]["text"].split() == [str(p) for p in (2, 3, 5, 7, 11)] + results[0]["text"].split()[5:]
    assert len(results[0]["text"].split()) == 95  # the primes up to 500, from primes.py
    assert calls[2]["statement"].startswith("INSERT OR IGNORE INTO primes")


async def test_exp10_runs_in_its_run_sh_layout(
        runtime_of: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/exp10-gbash-bench as its run.sh starts it: `mkdir -p dynamic work`, cwd = work, so
    the `default` volume (path ".") is work/ and `dynamic-root` (path "../dynamic") is the sibling
    directory loomcycle resolves it to — both relative to the process's directory, as loomcycle's
    validateVolumes does (filepath.Abs), and both must exist (neither runtime creates a static
    volume). LOOMCYCLE_BASH_ENABLED is treadle's `workspace.bash.enabled`.

    exp10-bash-agent runs to its report: the ephemeral VolumeDef is created (treadle answers no host
    path, so the report's `ephemeral_vol` is empty), each Bash op is timed, the clone of the author's
    /Users/… checkout fails inside `bench` (caught and reported, as on any machine without it).
    exp10-bashbox-agent: treadle has no Bashbox (loomcycle's gbash), so its first Bashbox call —
    outside any try in the code — ends the run `code_agent_threw` with `bashbox_unavailable`."""
    here = tmp_path / "exp10"
    (here / "work" / "reports").mkdir(parents=True)
    (here / "dynamic").mkdir()  # run.sh: mkdir -p "$HERE/data" "$HERE/dynamic" "$HERE/work" …
    monkeypatch.chdir(here / "work")  # run.sh: cd "$HERE/work"
    rt, disp = await runtime_of("examples/exp10-gbash-bench/loomcycle.yaml",
                                {"workspace": {"bash": {"enabled": True}}})
    run, text = await _run(rt, disp, "exp10-bash-agent", "run the benchmark", user="exp10")
    assert run.status == "completed", (run, text)
    report = json.loads(text)
    assert report["mode"] == "bash" and report["total_ms"] > 0, report
    assert not [e for e in report["errors"] if e["op"] == "ephemeral_create"], report["errors"]
    # treadle's VolumeDef answer names the volume, never a host path (docs/volumes.md): the report's
    # ephemeral_vol (loomcycle's `path` field) stays empty — the one difference in its output
    assert report["ephemeral_vol"] == "", report
    names = [op["name"] for op in report["ops"]]
    assert names[:2] == ["cleanup", "git_clone"] and "dir_depth" in names, names
    assert report["ops"][0]["result"] == "ok", report["ops"][0]
    box, _ = await _run(rt, disp, "exp10-bashbox-agent", "run the benchmark", user="exp10")
    assert box.status == "failed" and box.error is not None, box
    assert box.error["code"] == "code_agent_threw" and "bashbox" in box.error["error"].lower(), box.error
