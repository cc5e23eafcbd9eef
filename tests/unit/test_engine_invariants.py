"""The engine's invariants (core/treadle/engine/README.md) are numbered once, and every test the
README names as holding one still exists — a renamed or deleted test fails here, not silently."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "core" / "treadle" / "engine" / "README.md"
NAMED = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def _invariants() -> list[tuple[int, str]]:
    """(number, text up to the next item) of the README's numbered list."""
    text = README.read_text().split("\n## ", 1)[0]
    parts = re.split(r"^(\d+)\. ", text, flags=re.M)
    return [(int(parts[i]), parts[i + 1]) for i in range(1, len(parts), 2)]


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_the_invariants_are_numbered_once_in_order() -> None:
    numbers = [n for n, _ in _invariants()]
    assert numbers == list(range(1, len(numbers) + 1)), numbers


def test_every_invariant_names_what_holds_it() -> None:
    for number, text in _invariants():
        assert "*Held by:*" in text, f"invariant {number} names no test"


def test_every_named_test_exists() -> None:
    named = [m.groups() for _, text in _invariants() for m in NAMED.finditer(text)]
    assert len(named) >= 20, named
    missing = [f"{path}::{name}" for path, name in named
               if not (ROOT / path).is_file() or name not in _test_names(ROOT / path)]
    assert missing == [], f"the engine README names tests that do not exist: {missing}"
