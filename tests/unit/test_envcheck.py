"""Misspelled TREADLE_* variables are named (with the closest real one) — and the list of real
names stays complete: every TREADLE_* name the code, the scripts and the docs use is known."""

from __future__ import annotations

import re
from pathlib import Path

from treadle.cli.envcheck import known_names, unknown_variables

ROOT = Path(__file__).resolve().parents[2]


def test_a_misspelled_variable_is_named_with_the_closest_real_one() -> None:
    env = {"TREADLE_WORKER": "3", "TREADLE_WORKERS": "3", "TREADLE_ZZZ_NOTHING": "1", "PATH": "/bin"}
    assert unknown_variables(env) == [
        "TREADLE_WORKER is not a treadle setting (ignored); did you mean TREADLE_WORKERS?",
        "TREADLE_ZZZ_NOTHING is not a treadle setting (ignored)",
    ]


def test_every_name_in_use_is_known() -> None:
    from treadle_cloud.env import CloudSettings

    used: set[str] = set()
    for folder in ("core", "sidecar", "cloud", "functions", "infra", "scripts", "docs"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in {".py", ".sh", ".md", ".yaml", ".yml"} and path.is_file():
                used |= set(re.findall(r"\bTREADLE_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace")))
    used |= {f"TREADLE_{name.upper()}" for name in CloudSettings.model_fields}
    used -= {"TREADLE_ENV", "TREADLE_"}  # prose about the prefix itself
    assert sorted(used - known_names()) == []
