"""The public extension surface (as httpx pins its own): what `treadle.__all__` names, that each
name resolves to the object its module defines, and that nothing else leaks in."""

from __future__ import annotations

import subprocess
import sys

import treadle

EXPECTED = {"ModelRequest", "ModelResponse", "Park", "Provider", "Runtime", "Tool", "ToolContext", "ToolResult",
            "__version__", "testing"}


def test_the_public_surface_is_pinned() -> None:
    assert set(treadle.__all__) == EXPECTED


def test_every_exported_name_resolves_to_its_definition() -> None:
    from treadle import providers, runtime, tools
    from treadle import testing as testing_module

    for name in treadle.__all__:
        assert getattr(treadle, name) is not None
    assert treadle.Runtime is runtime.Runtime
    assert treadle.Tool is tools.base.Tool and treadle.Park is tools.base.Park
    assert treadle.Provider is providers.base.Provider
    assert treadle.testing is testing_module


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        _ = treadle.Engine
    except AttributeError as exc:
        assert "Engine" in str(exc)
    else:
        raise AssertionError("treadle.Engine should not be public")


def test_importing_the_package_imports_nothing_heavy() -> None:
    out = subprocess.run([sys.executable, "-c", "import sys, treadle; print(sorted(m for m in sys.modules"
                          " if m.startswith('treadle')))"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['treadle']", out
