"""treadle.wire imports a model's module when the model is first named (PEP 562)."""

from __future__ import annotations

import subprocess
import sys

import treadle.wire as wire


def test_every_exported_model_is_reachable_by_name() -> None:
    assert set(wire.__all__) == set(wire._MODULE_OF)
    for name in wire.__all__:
        assert getattr(wire, name).__name__ == name


def test_naming_a_model_imports_its_module_only() -> None:
    code = ("import sys\nfrom treadle.wire import RunRequest\n"
            "print(sorted(m for m in sys.modules if m.startswith('treadle.wire.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == ["treadle.wire._base", "treadle.wire.runs"]


def test_the_type_checking_imports_name_the_same_modules_as_the_lazy_table() -> None:
    """The package lists each model three times — for type checkers (the TYPE_CHECKING imports and
    `__all__`) and for the lazy import (`_MODULE_OF`); the three must not drift apart."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(wire.__file__).read_text())
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in ast.walk(node):
                if isinstance(imp, ast.ImportFrom) and imp.module and imp.module.startswith("treadle.wire."):
                    typed.update({alias.name: imp.module.removeprefix("treadle.wire.") for alias in imp.names})
    assert typed == wire._MODULE_OF
