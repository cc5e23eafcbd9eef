"""The default registry: every built-in tool (an agent still gets only the tools it names)."""

from __future__ import annotations

from treadle.builtins.agent import AgentTool
from treadle.builtins.agentdef import AgentDefTool
from treadle.builtins.channel import ChannelTool
from treadle.builtins.context import ContextTool
from treadle.builtins.evaluation import EvaluationTool
from treadle.builtins.files.bash import BashTool
from treadle.builtins.files.notebook import NotebookEditTool
from treadle.builtins.files.readwrite import EditTool, ReadTool, WriteTool
from treadle.builtins.files.search import GlobTool, GrepTool
from treadle.builtins.http import HttpTool
from treadle.builtins.interruption import InterruptionTool
from treadle.builtins.memory import MemoryTool
from treadle.builtins.scheduledef import ScheduleDefTool
from treadle.builtins.skilldef import SkillDefTool
from treadle.builtins.volumedef import VolumeDefTool
from treadle.builtins.webfetch import WebFetchTool
from treadle.builtins.webhookdef import WebhookDefTool
from treadle.builtins.websearch import WebSearchTool
from treadle.security.network import NetworkSetup
from treadle.tools.registry import ToolRegistry


def default_registry(network: NetworkSetup | None = None) -> ToolRegistry:
    """`network`: where the network tools (HTTP, WebFetch, WebSearch) read their process settings
    and resolve names (default: the environment and the system resolver; tests inject both)."""
    net = network or NetworkSetup()
    return ToolRegistry([MemoryTool(), ContextTool(), ChannelTool(), ScheduleDefTool(), WebhookDefTool(),
                         AgentTool(), InterruptionTool(), AgentDefTool(), SkillDefTool(), EvaluationTool(),
                         HttpTool(net), WebFetchTool(net), WebSearchTool(net),
                         ReadTool(), WriteTool(), EditTool(), GrepTool(), GlobTool(), NotebookEditTool(), BashTool(),
                         VolumeDefTool()])
