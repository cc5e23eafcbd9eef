"""A2A server cards (treadle.yaml `a2a_server_cards:`, loomcycle's shape): which agents a tenant
exposes to other agents over A2A 1.0, each as a skill of one Agent Card. Default: none — an
agent is reachable over A2A only if an operator names it here (api/a2a/)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class A2AExposedAgent(BaseModel):
    """One treadle agent offered as an A2A skill (`skill_id` defaults to the agent's name)."""

    model_config = ConfigDict(extra="forbid")
    agent_name: str = Field(min_length=1, max_length=128)
    skill_id: str | None = Field(default=None, max_length=128)
    skill_name: str | None = Field(default=None, max_length=256)
    description: str = ""
    tags: list[str] = []
    input_modes: list[Literal["text/plain"]] = ["text/plain"]
    output_modes: list[Literal["text/plain"]] = ["text/plain"]
    #: treadle's: the run is interactive (each answer parks it as `TASK_STATE_INPUT_REQUIRED`, the
    #: next message continues it); otherwise a task completes with the run's final answer
    interactive: bool = False

    @property
    def skill(self) -> str:
        return self.skill_id or self.agent_name


class A2AServerCardProvider(BaseModel):
    model_config = ConfigDict(extra="forbid")
    organization: str = ""
    url: str = ""


class A2AServerCardCaps(BaseModel):
    """Refused by name when asked for what treadle does not serve yet (push notifications, the
    extended card): never advertised and then ignored."""

    model_config = ConfigDict(extra="forbid")
    streaming: bool = True
    push_notifications: Literal[False] = False
    extended_agent_card: Literal[False] = False


class A2AServerCard(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=256)
    description: str = ""
    provider: A2AServerCardProvider | None = None
    capabilities: A2AServerCardCaps = Field(default_factory=A2AServerCardCaps)
    exposed_agents: list[A2AExposedAgent] = Field(min_length=1, max_length=64)

    def agent_for(self, skill_id: str | None) -> A2AExposedAgent | None:
        """The exposed agent a message's `skillId` names; with one agent exposed, that one."""
        if skill_id is None:
            return self.exposed_agents[0] if len(self.exposed_agents) == 1 else None
        return next((a for a in self.exposed_agents if a.skill == skill_id), None)

    def exposes(self, agent: str) -> bool:
        return any(a.agent_name == agent for a in self.exposed_agents)


__all__ = ["A2AExposedAgent", "A2AServerCard", "A2AServerCardCaps", "A2AServerCardProvider"]
