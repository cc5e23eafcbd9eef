"""The README shows what the demo prints: the real CLI (`treadle init`, then `treadle run demo …`
in a subprocess, serving in its own process) prints the same lines, ids and timings aside. And
the troubleshooting page the README links names only error codes treadle has."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.e2e.conftest import MakeDb

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Count your calls, then tell me how many you made."  # scripts/demo.sh's


def readme_demo_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("What the demo prints", 1)[1].split("```\n", 2)[1]
    return block.splitlines()


def shape(line: str) -> str:
    """A line with what varies between runs (the run id, durations) made generic."""
    line = re.sub(r"r_[0-9a-f]{32}", "r_ID", line)
    return re.sub(r"\d+(\.\d+)?s\b", "Ns", line)


def test_the_readme_shows_what_the_demo_prints(make_db: MakeDb, tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "treadle.cli.main"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TREADLE_")}
    env.update(
        {
            "DATABASE_URL": make_db("demo"),
            "NO_COLOR": "1",
            "TREADLE_LOG_LEVEL": "warning",
            "TREADLE_LISTEN": "127.0.0.1:9",
        }
    )  # no server there: the run serves in its own process
    subprocess.run([*cli, "init"], cwd=tmp_path, env=env, check=True, capture_output=True, timeout=60)
    out = subprocess.run(
        [*cli, "run", "demo", PROMPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    printed = [shape(line) for line in out.stdout.splitlines()]
    shown = [shape(line) for line in readme_demo_block()]
    start = printed.index(shown[0])
    gap = shown.index("…")
    assert printed[start : start + gap] == shown[:gap]  # the run's first lines, as shown
    assert printed[-(len(shown) - gap - 1) :] == shown[gap + 1 :]  # and its last ones


def test_the_troubleshooting_page_is_linked_and_names_real_error_codes() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "(docs/troubleshooting.md)" in readme
    page = (ROOT / "docs/troubleshooting.md").read_text()
    source = "\n".join(p.read_text() for p in (ROOT / "core/treadle").rglob("*.py"))
    codes = set(re.findall(r"`(?:\d{3} )?([a-z]+(?:_[a-z]+)+)`", page))
    codes -= {"system_prompt", "api_key_env", "pg_dump", "pg_ctl", "pg_restore"}  # keys and tools, not codes
    assert len(codes) >= 15, codes
    missing = sorted(c for c in codes if f'"{c}"' not in source and f"'{c}'" not in source)
    assert not missing, missing
