"""The default registry imports a built-in tool's module only when that tool is first asked for."""

from __future__ import annotations

import importlib
import inspect
import json
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
            "import json; print(json.dumps(sorted(m for m in sys.modules if m.startswith('treadle.builtins.')"
            " or m == 'treadle.substrate.evaluation')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded: list[Any] = json.loads(out)
    assert loaded == ["treadle.builtins.registry"]  # a client tool module too: only for a run that declares one


def test_build_deferred_leaves_nothing_for_the_first_invocation() -> None:
    code = ("import json, sys\nfrom pydantic import BaseModel\nfrom treadle.runtime import build_deferred\n"
            "built = build_deferred()\n"
            "def every(c):\n    for s in c.__subclasses__():\n        yield s\n        yield from every(s)\n"
            "left = sorted(c.__qualname__ for c in every(BaseModel)"
            " if c.__module__.startswith('treadle.') and not c.__pydantic_complete__)\n"
            "from treadle.builtins.registry import BUILTINS\n"
            "tools = sorted(m for m, _, _ in BUILTINS.values()"
            " if m not in sys.modules)\n"
            "print(json.dumps([built, left, tools, all(m in sys.modules for m in"
            " ('treadle.substrate.evaluation', 'treadle.engine.step'))]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    built, left, tools, evaluation = json.loads(out)
    assert "treadle.specs.schedule.ScheduleSpec" in built and "treadle.config.RetentionConfig" in built
    assert "treadle.config.TreadleConfig" not in built  # built at import: every invocation validates it
    assert left == [] and tools == [] and evaluation


def test_threads_asking_at_once_get_one_tool() -> None:
    from concurrent.futures import ThreadPoolExecutor

    built: list[int] = []

    class Slow:
        name = "Slow"

        def __init__(self) -> None:
            built.append(1)

    reg = ToolRegistry()
    reg.register_lazy("Slow", Slow)  # type: ignore[arg-type]
    with ThreadPoolExecutor(8) as pool:
        tools = list(pool.map(lambda _: reg.get("Slow"), range(32)))
    assert built == [1] and all(t is tools[0] for t in tools) and reg.names() == ["Slow"]
