"""The default registry: every built-in tool (an agent still gets only the tools it names)."""

from __future__ import annotations

from treadle.builtins.agent import AgentTool
from treadle.builtins.agentdef import AgentDefTool
from treadle.builtins.channel import ChannelTool
from treadle.builtins.context import ContextTool
from treadle.builtins.evaluation import EvaluationTool
from treadle.builtins.interruption import InterruptionTool
from treadle.builtins.memory import MemoryTool
from treadle.builtins.scheduledef import ScheduleDefTool
from treadle.builtins.skilldef import SkillDefTool
from treadle.builtins.webhookdef import WebhookDefTool
from treadle.tools.registry import ToolRegistry


def default_registry() -> ToolRegistry:
    return ToolRegistry([MemoryTool(), ContextTool(), ChannelTool(), ScheduleDefTool(), WebhookDefTool(),
                         AgentTool(), InterruptionTool(), AgentDefTool(), SkillDefTool(), EvaluationTool()])
