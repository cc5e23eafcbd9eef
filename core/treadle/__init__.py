"""treadle — a durable agent runtime whose state is the run's transcript in Postgres.

The public extension surface is what `__all__` names (pinned by tests/unit/test_exported_members.py):
the runtime facade, the Tool port and what a tool returns, the Provider port and its request and
response, and `testing` (test runtimes and scripted providers). Each name is imported on first use
(PEP 562), so `import treadle` stays cheap for the Lambda functions' cold start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "ModelRequest",
    "ModelResponse",
    "Park",
    "Provider",
    "Runtime",
    "Tool",
    "ToolContext",
    "ToolResult",
    "__version__",
    "testing",
]

_WHERE = {
    "Runtime": "treadle.runtime",
    "Tool": "treadle.tools.base",
    "ToolContext": "treadle.tools.base",
    "ToolResult": "treadle.tools.base",
    "Park": "treadle.tools.base",
    "Provider": "treadle.providers.base",
    "ModelRequest": "treadle.providers.base",
    "ModelResponse": "treadle.providers.base",
}

if TYPE_CHECKING:  # the same names, for type checkers (this package's own modules, no circle)
    from treadle import testing
    from treadle.providers.base import ModelRequest, ModelResponse, Provider
    from treadle.runtime import Runtime
    from treadle.tools.base import Park, Tool, ToolContext, ToolResult


def __getattr__(name: str) -> Any:
    if name == "testing":
        return importlib.import_module("treadle.testing")
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'treadle' has no attribute {name!r}")
    return getattr(importlib.import_module(where), name)


def __dir__() -> list[str]:
    return sorted(__all__)
