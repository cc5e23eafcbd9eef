"""The substrate: content-addressed AgentDefs and SkillDefs, vector Memory, Evaluations, and the
pinning of runs to the definitions they start with.

The runtime builds one `Substrate`; the built-in tools (through `ToolServices`) and the HTTP
routers (api/substrate.py, api/memory.py) use that instance, so every surface behaves — and
hashes — the same.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from treadle.embeddings.base import Embedder
from treadle.engine.agents import AgentCatalogue
from treadle.store.db import Pool
from treadle.store.defs import DefStore
from treadle.store.memory import MemoryStore
from treadle.store.runs import RunStore
from treadle.substrate.agentdefs import AgentDefFamily
from treadle.substrate.memory import MemoryService
from treadle.substrate.resolve import AgentPinning
from treadle.substrate.skilldefs import SkillDefFamily

if TYPE_CHECKING:
    from treadle.substrate.evaluation import EvaluationService


class Substrate:
    def __init__(
        self, pool: Pool, catalogue: AgentCatalogue, runs: RunStore, memory: MemoryStore, embedder: Embedder | None
    ) -> None:
        defs = DefStore(pool)
        self.agents = AgentDefFamily(defs, catalogue)
        self.skills = SkillDefFamily(defs, catalogue.config.skills)
        self._pool, self._runs, self._defs = pool, runs, defs
        self.memory = MemoryService(memory, catalogue.config.memory, embedder)
        self.pinning = AgentPinning(defs, catalogue)

    @cached_property
    def evaluations(self) -> EvaluationService:
        """Evaluations (the Evaluation tool, /v1/_evaluation): built on first use — a step that
        never grades a run never imports them."""
        from treadle.store.evaluations import EvaluationStore
        from treadle.substrate.evaluation import EvaluationService

        return EvaluationService(EvaluationStore(self._pool), self._runs, self._defs)
