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
