"""The default registry: every built-in tool (an agent still gets only the tools it names).

Each built-in is registered by name and imported on first use (`ToolRegistry.register_lazy`): a
worker whose agents name Memory and Agent imports those two tool modules, not twenty. BUILTINS
is the table — a test checks each entry's class carries that name.
"""

from __future__ import annotations

from functools import partial
from importlib import import_module

from treadle.security.network import NetworkSetup
from treadle.tools.base import Tool
from treadle.tools.registry import ToolRegistry

#: tool name → (module, class, whether the class takes the NetworkSetup), in registration order
BUILTINS: dict[str, tuple[str, str, bool]] = {
    "Memory": ("treadle.builtins.memory", "MemoryTool", False),
    "Context": ("treadle.builtins.context", "ContextTool", False),
    "Channel": ("treadle.builtins.channel", "ChannelTool", False),
    "ScheduleDef": ("treadle.builtins.scheduledef", "ScheduleDefTool", False),
    "WebhookDef": ("treadle.builtins.webhookdef", "WebhookDefTool", False),
    "Agent": ("treadle.builtins.agent", "AgentTool", False),
    "Interruption": ("treadle.builtins.interruption", "InterruptionTool", False),
    "AgentDef": ("treadle.builtins.agentdef", "AgentDefTool", False),
    "SkillDef": ("treadle.builtins.skilldef", "SkillDefTool", False),
    "Evaluation": ("treadle.builtins.evaluation", "EvaluationTool", False),
    "HTTP": ("treadle.builtins.http", "HttpTool", True),
    "WebFetch": ("treadle.builtins.webfetch", "WebFetchTool", True),
    "WebSearch": ("treadle.builtins.websearch", "WebSearchTool", True),
    "Read": ("treadle.builtins.files.readwrite", "ReadTool", False),
    "Write": ("treadle.builtins.files.readwrite", "WriteTool", False),
    "Edit": ("treadle.builtins.files.readwrite", "EditTool", False),
    "Grep": ("treadle.builtins.files.search", "GrepTool", False),
    "Glob": ("treadle.builtins.files.search", "GlobTool", False),
    "NotebookEdit": ("treadle.builtins.files.notebook", "NotebookEditTool", False),
    "Bash": ("treadle.builtins.files.bash", "BashTool", False),
    "Bashbox": ("treadle.builtins.bashbox", "BashboxTool", False),
    "VolumeDef": ("treadle.builtins.volumedef", "VolumeDefTool", False),
    "Skill": ("treadle.builtins.skill", "SkillTool", False),
    "TeamDef": ("treadle.builtins.teamdef", "TeamDefTool", False),
    "History": ("treadle.builtins.history", "HistoryTool", False),
    "Path": ("treadle.builtins.path", "PathTool", False),
    "Document": ("treadle.builtins.document", "DocumentTool", False),
}


def load_builtin(name: str, network: NetworkSetup) -> Tool:
    """Import and build the built-in tool `name` (a key of BUILTINS)."""
    module, cls_name, networked = BUILTINS[name]
    cls = getattr(import_module(module), cls_name)
    tool: Tool = cls(network) if networked else cls()
    return tool


def import_all() -> None:
    """Import every built-in tool's module (what a SnapStart INIT puts in its snapshot: a restored
    environment then builds a tool without importing)."""
    for module, _, _ in BUILTINS.values():
        import_module(module)


def default_registry(network: NetworkSetup | None = None) -> ToolRegistry:
    """`network`: where the network tools (HTTP, WebFetch, WebSearch) read their process settings
    and resolve names (default: the environment and the system resolver; tests inject both)."""
    net = network or NetworkSetup()
    registry = ToolRegistry()
    for name in BUILTINS:
        registry.register_lazy(name, partial(load_builtin, name, net))
    return registry
