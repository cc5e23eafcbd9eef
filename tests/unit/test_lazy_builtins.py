"""The default registry imports a built-in tool's module only when that tool is first asked for."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from typing import Any

import pytest

from treadle.builtins.registry import BUILTINS, default_registry, load_builtin
from treadle.errors import ConfigError
from treadle.security.network import NetworkSetup
from treadle.tools.registry import ToolRegistry


@pytest.mark.parametrize("name", list(BUILTINS))
def test_each_entry_names_its_class(name: str) -> None:
    module, cls_name, networked = BUILTINS[name]
    cls = getattr(importlib.import_module(module), cls_name)
    assert cls.name == name
    tool = load_builtin(name, NetworkSetup())
    assert type(tool) is cls and tool.description and tool.input_schema["type"] == "object"
    assert ("network" in inspect.signature(cls).parameters) == networked


def test_a_tool_is_built_once_on_first_use_and_names_list_all() -> None:
    reg = default_registry()
    assert reg.names() == sorted(BUILTINS) and reg.loaded() == []
    memory = reg.get("Memory")
    assert memory is not None and reg.get("Memory") is memory and reg.loaded() == ["Memory"]
    assert [t.name for t in reg.for_agent("a", ["Context", "Memory"])] == ["Context", "Memory"]
    assert reg.loaded() == ["Context", "Memory"]


def test_a_lazy_name_is_taken() -> None:
    reg = default_registry()

    class Memory:
        name = "Memory"

    with pytest.raises(ConfigError, match="'Memory' registered twice"):
        reg.register(Memory())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'Memory' registered twice"):
        reg.register_lazy("Memory", lambda: Memory())  # type: ignore[arg-type,return-value]


def test_a_loader_that_builds_another_tool_is_refused() -> None:
    class Other:
        name = "Other"

    reg = ToolRegistry()
    reg.register_lazy("Mine", lambda: Other())  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigError, match="'Mine' was registered, but its loader built 'Other'"):
        reg.get("Mine")


def test_the_runtime_module_imports_no_tool_module() -> None:
    code = ("import sys, treadle.runtime\n"
            "print(sorted(m for m in sys.modules if m.startswith('treadle.builtins.')"
            " or m == 'treadle.substrate.evaluation'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded: list[Any] = eval(out)  # noqa: S307 — our own print of a list of str
    assert loaded == ["treadle.builtins.client", "treadle.builtins.registry"]
