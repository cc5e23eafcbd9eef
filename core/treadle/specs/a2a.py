"""A2A config, loomcycle's shapes.

`a2a_server_cards:` — which agents a tenant exposes to other agents over A2A 1.0, each as a skill of
one Agent Card. Default: none — an agent is reachable over A2A only if an operator names it here
(api/a2a/).

`a2a_agents:` — remote A2A peers treadle agents may call (treadle/a2a/), each skill a tool
`a2a__<peer>__<skill>`; an agent reaches one only by listing it (or `a2a__<peer>__*`) in `tools:`:

    a2a_agents:
      billing:
        agent_card_url: https://billing.example/.well-known/agent-card.json   # or endpoint + binding
        auth: {scheme: http, bearer_credential_ref: billing}   # the run's credential / CredentialDef
        expected_skills: [{id: invoice, required: true}]
        poll_interval_seconds: 5          # treadle's: how often a parked call reads the remote task
        timeout_seconds: 86400            # treadle's: a call's whole budget (parked included)

`a2a_client:` — treadle's: `push_url`, where remote agents post push notifications to this treadle
(its public base URL + `/a2a/push`); without it a parked call is woken by polling only."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

PREFIX = "a2a__"
#: a peer name or a skill id in a tool name: no "__" (it separates the parts)
PART = re.compile(r"^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$")


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
    """What the card offers. Push notifications are served (treadle/a2a/push.py; false: the card
    says so and every push op is refused); the extended card is refused by name: never advertised
    and then ignored."""

    model_config = ConfigDict(extra="forbid")
    streaming: bool = True
    push_notifications: bool = True
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


def tool_name(peer: str, skill: str) -> str:
    return f"{PREFIX}{peer}__{skill}"


def split_tool_name(name: str) -> tuple[str, str] | None:
    """(peer, skill or "*") of an `a2a__<peer>__<skill>` name; None if `name` is not one."""
    if not name.startswith(PREFIX):
        return None
    peer, sep, skill = name[len(PREFIX):].partition("__")
    if not sep or not skill or not PART.match(peer) or (skill != "*" and not PART.match(skill)):
        return None
    return peer, skill


class A2AAgentAuth(BaseModel):
    """How treadle authenticates to the peer: `scheme: http` with a bearer read from the run's
    credential (or the tenant's CredentialDef) of that name. apiKey/oauth2/mtls are refused by name."""

    model_config = ConfigDict(extra="forbid")
    scheme: Literal["", "http"] = ""
    bearer_credential_ref: str = Field(default="", pattern=r"^([A-Za-z0-9_-]{1,64})?$")


class A2AExpectedSkill(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=64, pattern=PART.pattern)
    required: bool = False


class A2AAgentSpec(BaseModel):
    """One remote peer (loomcycle's `a2a_agents.<name>`): exactly one of `agent_card_url` or
    `endpoint` + `binding`. `binding: grpc` and `verify_signed_card: true` are refused by name."""

    model_config = ConfigDict(extra="forbid")
    agent_card_url: str = Field(default="", max_length=2048)
    endpoint: str = Field(default="", max_length=2048)
    binding: Literal["", "jsonrpc", "rest"] = ""
    auth: A2AAgentAuth = Field(default_factory=A2AAgentAuth)
    expected_skills: list[A2AExpectedSkill] = Field(default=[], max_length=64)
    verify_signed_card: Literal[False] = False
    poll_interval_seconds: float = Field(default=5.0, ge=0.5, le=3600)
    timeout_seconds: float = Field(default=86_400.0, gt=0, le=30 * 86_400)

    @model_validator(mode="after")
    def _one_target(self) -> A2AAgentSpec:
        direct = bool(self.endpoint or self.binding)
        if bool(self.agent_card_url) == direct:
            raise ValueError("set exactly one of agent_card_url or endpoint + binding")
        if direct and not (self.endpoint and self.binding):
            raise ValueError("endpoint and binding go together")
        for url in (self.agent_card_url, self.endpoint):
            if url and not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r}: an http(s) URL is needed")
        if self.auth.scheme == "http" and not self.auth.bearer_credential_ref:
            raise ValueError("auth.scheme http needs auth.bearer_credential_ref")
        return self


def _peer_names(peers: dict[str, A2AAgentSpec]) -> dict[str, A2AAgentSpec]:
    for name in peers:
        if not PART.match(name) or len(name) > 64:
            raise ValueError(f"a2a_agents: peer name {name!r} must match [A-Za-z0-9_-]{{1,64}} without '__'")
    return peers


#: treadle.yaml's `a2a_agents:` (peer names checked: they are part of tool names)
A2AAgents = Annotated[dict[str, A2AAgentSpec], AfterValidator(_peer_names)]


class A2AClientConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: this treadle's push receiver as peers reach it (e.g. https://treadle.example/a2a/push); "": poll only
    push_url: str = Field(default="", max_length=2048, pattern=r"^(https?://.+)?$")


__all__ = [
    "PREFIX",
    "A2AAgentAuth",
    "A2AAgentSpec",
    "A2AAgents",
    "A2AClientConfig",
    "A2AExpectedSkill",
    "A2AExposedAgent",
    "A2AServerCard",
    "A2AServerCardCaps",
    "A2AServerCardProvider",
    "split_tool_name",
    "tool_name",
]
