"""render_diagram's output is Mermaid that Mermaid's own parser accepts (issue 40): every
diagram of the team tests — plain, highlighted, hostile ids sanitised — parsed by the `mermaid`
npm package in Node (tests/teams/mermaid; scripts/test.sh installs it where npm is present)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.teams import REVIEW_TEAM
from treadle.teams.graph import parse
from treadle.teams.render import render_mermaid

CHECKER = Path(__file__).parent / "mermaid"
pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (CHECKER / "node_modules" / "mermaid").is_dir(),
    reason="needs node and `npm install --prefix tests/teams/mermaid` (scripts/test.sh does it)")

GRAPHS = {
    "review": REVIEW_TEAM,
    "linear": {"entry": "draft", "states": [{"state": "draft", "handler": {"kind": "agent", "agent": "writer"}},
                                            {"state": "done", "handler": {"kind": "terminal"}}],
               "transitions": [{"from": "draft", "to": "done", "on": "success"}]},
    "conditional": {"entry": "triage", "max_iterations": 2, "colors": {"states": {"triage": "#123"}},
                    "states": [{"state": "triage", "handler": {"kind": "consolidator", "agent": "router"}},
                               {"state": "fix", "handler": {"kind": "agent", "agent": "coder",
                                                            "consolidator": "qa"}},
                               {"state": "closed", "handler": {"kind": "terminal"}}],
                    "transitions": [{"from": "triage", "to": "fix", "on": "conditional:$.kind=='bug'"},
                                    {"from": "triage", "to": "closed", "on": "success"},
                                    {"from": "fix", "to": "triage", "on": "pushback:qa-failed"},
                                    {"from": "fix", "to": "closed", "on": "success"}]},
    "hostile": {"entry": "a\n  x --> [*]", "states": [{"state": "a\n  x --> [*]", "handler": {"kind": "terminal"}}],
                "colors": {"states": {"a\n  x --> [*]": "red; } classDef evil"}}},
}


def mermaid_parse(source: str) -> dict[str, object]:
    done = subprocess.run(["node", str(CHECKER / "parse.mjs")], input=source, capture_output=True, text=True,
                          timeout=120, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_render_diagram_is_valid_mermaid(name: str) -> None:
    d = parse(GRAPHS[name])
    for highlight in ("", d.states[0].id):
        verdict = mermaid_parse(render_mermaid(name, d, highlight))
        assert verdict == {"ok": True, "type": "stateDiagram"}, verdict


def test_the_parser_can_refuse() -> None:
    assert mermaid_parse("stateDiagram-v2\n  a --> --> b\n")["ok"] is False
