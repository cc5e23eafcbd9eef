"""`treadle import claude-code`: a .claude folder's subagents and skills, a dry run listing what
is lossy, and --write against a real sidecar (then a run of the imported agent with its skill)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from treadle.config import Settings, parse_config
from treadle.testing import ACCEPT_JSON

ROOT = Path(__file__).resolve().parents[2]

REVIEWER = """---
name: reviewer
description: Reviews a change and says what is wrong.
tools: Read, Grep, WebFetch, Task, Skill, mcp__github__get_diff
model: inherit
color: blue
skills: house-style
---
You review changes. Be brief.
"""

SUMMARIZER = """---
name: summarizer
description: Summarizes text.
model: sonnet
---
You summarize.
"""

SKILL = """---
name: house-style
description: Our writing rules.
allowed-tools: Read, WebSearch
---
Write short sentences.
"""


def claude_dir(tmp_path: Path) -> Path:
    root = tmp_path / ".claude"
    (root / "agents").mkdir(parents=True)
    (root / "agents" / "reviewer.md").write_text(REVIEWER)
    (root / "agents" / "summarizer.md").write_text(SUMMARIZER)
    skill = root / "skills" / "house-style"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL)
    (skill / "scripts" / "check.py").write_text("print('hi')\n")
    return root


def treadle(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "treadle.cli.main", "import", "claude-code", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=60, env={**os.environ, **(env or {})})


def test_dry_run_lists_what_it_would_create_and_what_is_lossy(tmp_path: Path) -> None:
    root = claude_dir(tmp_path)
    out = treadle("--from", str(root))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "→ SkillDef house-style" in text and "→ AgentDef reviewer" in text and "→ AgentDef summarizer" in text
    assert text.index("SkillDef house-style") < text.index("AgentDef reviewer")  # skills first
    for lossy in ("tools Read, Grep: kept, but bound to no volume — pass --volume NAME",
                  "frontmatter color: not imported", "1 other file(s) of the skill not imported: scripts/check.py",
                  "tools: absent (Claude Code grants every tool)", "tool mcp__github__get_diff: kept"):
        assert lossy in text, lossy
    assert "dry run: nothing written" in text

    plan = json.loads(treadle("--from", str(root), "--json").stdout)
    reviewer = next(p for p in plan if p["name"] == "reviewer")
    assert reviewer["overlay"]["tools"] == ["Read", "Grep", "WebFetch", "Agent", "Skill", "mcp__github__get_diff"]
    assert "volumes" not in reviewer["overlay"]
    assert reviewer["mapped"] == ["Read", "Grep", "WebFetch", "Task → Agent", "Skill"]
    assert reviewer["overlay"]["skills"] == ["house-style"] and reviewer["overlay"]["model"] == "sonnet"
    assert reviewer["overlay"]["system_prompt"] == "You review changes. Be brief."
    skill = next(p for p in plan if p["name"] == "house-style")
    assert skill["overlay"] == {"body": "Write short sentences.", "description": "Our writing rules.",
                                "tools": ["Read", "WebSearch"]}
    assert treadle("--from", str(tmp_path / "missing")).returncode == 2


CODER = """---
name: coder
description: Changes code.
tools: Read, Grep, Glob, LS, Edit, MultiEdit, Write, Bash, BashOutput, TodoWrite, WebSearch
---
You change code.
"""


def test_claude_codes_file_and_shell_tools_map_to_treadles_with_a_volume(tmp_path: Path) -> None:
    root = claude_dir(tmp_path)
    (root / "agents" / "coder.md").write_text(CODER)
    plan = json.loads(treadle("--from", str(root), "--json", "--volume", "work").stdout)
    coder = next(p for p in plan if p["name"] == "coder")
    assert coder["overlay"]["tools"] == ["Read", "Grep", "Glob", "Edit", "Write", "Bash", "WebSearch"]
    assert coder["overlay"]["volumes"] == [{"name": "work", "mode": "rw"}]  # Edit, Write, Bash write
    assert coder["mapped"] == ["Read", "Grep", "Glob", "Edit", "Write", "WebSearch"]
    lossy = "\n".join(coder["lossy"])
    for line in ("tool LS → Glob: narrowed", "tool MultiEdit → Edit: narrowed", "tool Bash → Bash: narrowed "
                 "(treadle's restricted Bash", "tool BashOutput: dropped (no background shells",
                 "tool TodoWrite: dropped (no todo list tool"):
        assert line in lossy, line
    reviewer = next(p for p in plan if p["name"] == "reviewer")
    assert reviewer["overlay"]["volumes"] == [{"name": "work", "mode": "ro"}]  # Read, Grep only read
    text = treadle("--from", str(root), "--volume", "work").stdout
    assert "volume: work (rw)" in text and "mapped: Read, Grep, Glob, Edit, Write, WebSearch" in text


MCP_JSON = {"mcpServers": {
    "github": {"type": "http", "url": "https://mcp.example.com/mcp",
               "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}},
    "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."]},
    "old": {"type": "sse", "url": "https://sse.example.com/sse"},
}}


def test_mcp_json_http_servers_become_mcpserverdefs(tmp_path: Path) -> None:
    root = claude_dir(tmp_path)
    (tmp_path / ".mcp.json").write_text(json.dumps(MCP_JSON))
    plan = json.loads(treadle("--from", str(root), "--json").stdout)
    servers = {p["name"]: p for p in plan if p["kind"] == "mcp"}
    assert [p["kind"] for p in plan][:3] == ["mcp", "mcp", "mcp"]  # before the agents that use them
    assert servers["github"]["overlay"] == {"transport": "http", "url": "https://mcp.example.com/mcp",
                                            "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}}
    assert "header Authorization: ${GITHUB_TOKEN} is not expanded" in "\n".join(servers["github"]["lossy"])
    assert servers["files"]["overlay"] == {} and "stdio" in servers["files"]["lossy"][0]
    assert servers["old"]["overlay"] == {} and "SSE transport" in servers["old"]["lossy"][0]
    text = treadle("--from", str(root)).stdout
    assert "→ MCPServerDef github" in text and "→ (not imported) files" in text


async def test_write_creates_the_defs_and_the_imported_agent_runs(tmp_path: Path, migrated_db_url: str) -> None:
    root = claude_dir(tmp_path)
    (root / "agents" / "reviewer.md").write_text(REVIEWER.replace(", mcp__github__get_diff", ""))
    config = parse_config({"models": {"sonnet": {"provider": "mock", "model": "echo"}}, "agents": {},
                           "volumes": {"work": {"mode": "rw", "default": True}}})
    settings = Settings(database_url=migrated_db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=2,
                        auth_token=None, sweep_interval_seconds=30.0)
    server = BackgroundServer(settings, config)
    base = await server.start()
    try:
        (tmp_path / ".mcp.json").write_text(json.dumps(MCP_JSON))
        first = await asyncio.to_thread(treadle, "--from", str(root), "--write", "--url", base, "--volume", "work",
                                        "--no-discover")
        assert first.returncode == 0, first.stdout + first.stderr
        assert "created mcp github" in first.stdout and "mcp files" not in first.stdout and "FAILED" not in first.stdout
        async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=base, timeout=60) as client:
            assert "github" in (await client.get("/v1/_mcpserverdef/names")).json()["names"]
        (tmp_path / ".mcp.json").unlink()
        assert "created skill house-style" in first.stdout and "created agent reviewer" in first.stdout
        again = await asyncio.to_thread(treadle, "--from", str(root), "--write", "--url", base, "--volume", "work")
        assert again.returncode == 0 and again.stdout.count("unchanged") == 3, again.stdout
        (root / "agents" / "summarizer.md").write_text(SUMMARIZER.replace("You summarize.", "You summarize well."))
        changed = await asyncio.to_thread(treadle, "--from", str(root), "--write", "--url", base, "--volume", "work")
        assert "forked agent summarizer" in changed.stdout and "version 2" in changed.stdout, changed.stdout

        async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=base, timeout=60) as client:
            names = (await client.get("/v1/_agentdef/names")).json()["names"]
            assert {"reviewer", "summarizer"} <= set(names)
            got = (await client.post("/v1/_agentdef", json={"op": "get", "name": "reviewer"})).json()
            assert {"Read", "Grep"} <= set(got["body"]["tools"]), got  # the file tools stay …
            assert "work" in json.dumps(got["body"]["volumes"]), got  # … bound to the volume
            resp = await client.post("/v1/runs", json={"agent": "reviewer", "prompt": "look at this",
                                                       "metadata": {"t": "import"}})
            assert resp.status_code == 202, resp.text
            await client.get(f"/v1/runs/{resp.json()['run_id']}/stream")
            run = (await client.get(f"/v1/runs/{resp.json()['run_id']}")).json()
            assert run["status"] == "completed" and run["def_id"]  # the imported AgentDef …
            assert set(run["skill_def_ids"]) == {"house-style"}  # … with the imported skill pinned
    finally:
        await server.stop()
