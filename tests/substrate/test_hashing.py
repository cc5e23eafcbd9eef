"""Content hashes: canonical, path-independent (yaml, overlay, CLI), and blind to what is not
the agent's behaviour."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from treadle.config import AgentConfig, parse_config
from treadle.domain.substrate import SkillSpec
from treadle.substrate.agentdefs import agent_body, agent_content_sha256, agent_hash
from treadle.substrate.skilldefs import skill_body, skill_content_sha256

DEF = {"system_prompt": "You review code.\n", "tools": ["Memory", "Context"], "max_iterations": 5,
       "skills": ["style"], "model": "tool-caller", "mock": {"tool_calls": 2}}


def test_defaults_and_line_endings_do_not_change_the_hash() -> None:
    base = agent_hash(AgentConfig.model_validate(DEF))
    assert base.startswith("sha256:") and len(base) == 7 + 64
    explicit_defaults = {**DEF, "max_tokens": 4096, "memory_scopes": ["agent", "user"], "agent_def_scopes": []}
    crlf = {**DEF, "system_prompt": "You review code.\r\n  \r\n"}
    assert agent_hash(AgentConfig.model_validate(explicit_defaults)) == base
    assert agent_hash(AgentConfig.model_validate(crlf)) == base


def test_behaviour_changes_the_hash_but_description_and_def_scopes_do_not() -> None:
    base = agent_hash(AgentConfig.model_validate(DEF))
    changes: tuple[dict[str, object], ...] = (
        {"system_prompt": "You write code."}, {"tools": ["Memory"]}, {"max_iterations": 6},
        {"skills": []}, {"model": "echo"}, {"memory_scopes": ["agent"]})
    for change in changes:
        assert agent_hash(AgentConfig.model_validate({**DEF, **change})) != base, change
    for same in ({"description": "reviews"}, {"agent_def_scopes": ["any"]}, {"skill_def_scopes": ["self"]}):
        assert agent_hash(AgentConfig.model_validate({**DEF, **same})) == base, same


def test_body_round_trips_to_the_same_hash() -> None:
    body = agent_body(AgentConfig.model_validate(DEF))
    again = agent_body(AgentConfig.model_validate(body))
    assert again == body and agent_content_sha256(again) == agent_content_sha256(body)


def test_skill_hash_covers_body_and_tools_only() -> None:
    a = skill_content_sha256(skill_body(SkillSpec(body="Be terse.\r\n", tools=["Memory"])))
    b = skill_content_sha256(skill_body(SkillSpec(body="Be terse.", tools=["Memory"], description="x")))
    c = skill_content_sha256(skill_body(SkillSpec(body="Be terse!", tools=["Memory"])))
    assert a == b != c


def test_cli_prints_the_yaml_agent_hash(tmp_path: Path) -> None:
    # `treadle hash` prints loomcycle's hash (tests/loomcycle/test_hashes.py); `--treadle` this one
    cfg = tmp_path / "treadle.yaml"
    cfg.write_text(yaml.safe_dump({"agents": {"rev": DEF}, "skills": {"style": {"body": "Be terse."}}}))
    expected = agent_hash(parse_config(yaml.safe_load(cfg.read_text())).agents["rev"])
    out = subprocess.run([sys.executable, "-m", "treadle.cli.main", "--config", str(cfg), "hash", "agent", "rev",
                          "--treadle"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == expected
    skill = subprocess.run([sys.executable, "-m", "treadle.cli.main", "--config", str(cfg), "hash", "skill", "style",
                            "--treadle"],
                           capture_output=True, text=True, check=True)
    assert skill.stdout.strip() == skill_content_sha256(skill_body(SkillSpec(body="Be terse.")))
    missing = subprocess.run([sys.executable, "-m", "treadle.cli.main", "--config", str(cfg), "hash", "agent", "x"],
                             capture_output=True, text=True)
    assert missing.returncode == 1 and "no agent 'x'" in missing.stderr
