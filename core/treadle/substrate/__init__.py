"""The substrate: content-addressed AgentDefs and SkillDefs, vector Memory, Evaluations.

`substrate(rt)` is the runtime's one instance; the built-in tools (tools/agentdef.py,
skilldef.py, evaluation.py, memory.py, context.py) and the HTTP routers (api/substrate.py,
api/memory.py) go through it, so every surface behaves — and hashes — the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from treadle.specs.memory import MemoryConfig
from treadle.substrate.agentdefs import AgentDefFamily
from treadle.substrate.evaluation import EvaluationService
from treadle.substrate.memory import MemoryService
from treadle.substrate.skilldefs import SkillDefFamily

if TYPE_CHECKING:
    from treadle.runtime import Runtime


class Substrate:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.agents = AgentDefFamily(rt)
        self.skills = SkillDefFamily(rt)
        self.evaluations = EvaluationService(rt)
        config: MemoryConfig = rt.config.memory
        self.memory = MemoryService(rt.memory, config, rt.engine.services.get("embedder"))


def substrate(rt: Runtime) -> Substrate:
    sub = rt.extras.get("substrate")
    if not isinstance(sub, Substrate):
        sub = Substrate(rt)
        rt.extras["substrate"] = sub
    return sub
