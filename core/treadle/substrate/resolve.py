"""Which agent a run runs: pinned at start, resolved at every step.

At start (`pin_run`), a run of NAME takes the tenant's promoted AgentDef of NAME if there is one,
else the treadle.yaml agent; the def_id and its content hash are recorded on the run, and every
skill the agent lists is pinned by name (the promoted SkillDef's def_id, or "yaml"). A step
(`AgentResolver`) rebuilds exactly that agent — defs are immutable, so forking or promoting
later never changes a running run — and appends the skill bodies to its system prompt.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from treadle.config import AgentConfig
from treadle.engine.agents import ResolvedAgent, resolve_agents
from treadle.errors import TreadleError, UnknownAgent
from treadle.store.defs import DefStore
from treadle.substrate.agentdefs import agent_hash
from treadle.substrate.skilldefs import KIND as SKILL

if TYPE_CHECKING:
    from treadle.runtime import Runtime
    from treadle.store.runs import NewRun
    from treadle.store.steps import LeasedRun

log = logging.getLogger("treadle.substrate")
AGENT = "agent"
YAML_PIN = "yaml"
MISSING_PIN = "missing"
CACHE_SIZE = 512


def compose_system_prompt(system_prompt: str, skills: list[tuple[str, str]]) -> str:
    """The agent's prompt, then one section per skill, in the order the agent lists them."""
    parts = [system_prompt.rstrip()] if system_prompt.strip() else []
    parts += [f"## Skill: {name}\n\n{body.strip()}" for name, body in skills]
    return "\n\n".join(parts)


async def pin_run(rt: Runtime, new: NewRun) -> None:
    """Fill `new.def_id`, `new.def_content_sha256` and `new.skill_def_ids` (a skill that does not
    exist is pinned as "missing" and left out), or raise UnknownAgent. A caller may preset
    `new.def_id` to run that exact version."""
    defs = DefStore(rt.pool)
    cfg: AgentConfig
    if new.def_id is not None:
        record = await defs.get(new.tenant_id, AGENT, def_id=new.def_id)
        if record is None or record.status != "active" or record.name != new.agent:
            raise UnknownAgent(f"AgentDef {new.def_id!r} of agent {new.agent!r} not found (or retired)")
        cfg = AgentConfig.model_validate(record.body)
        new.def_content_sha256 = record.content_sha256
    else:
        record = await defs.get(new.tenant_id, AGENT, name=new.agent)
        if record is not None:
            cfg = AgentConfig.model_validate(record.body)
            new.def_id, new.def_content_sha256 = record.def_id, record.content_sha256
        elif new.agent in rt.agents:
            cfg = rt.agents[new.agent].config
            new.def_content_sha256 = static_hash(rt, new.agent)
        else:
            raise UnknownAgent(f"unknown agent {new.agent!r}")
    if cfg.skills:
        pins: dict[str, str] = {}
        for name in cfg.skills:
            skill = await defs.get(new.tenant_id, SKILL, name=name)
            if skill is not None:
                pins[name] = skill.def_id
            elif name in rt.config.skills:
                pins[name] = YAML_PIN
            else:  # not created yet (an agent may author its own skills): the run goes without it
                log.info("run of %r: skill %r is neither in treadle.yaml nor a promoted SkillDef", new.agent, name)
                pins[name] = MISSING_PIN
        new.skill_def_ids = pins


async def promoted_agents(rt: Runtime, tenant_id: str, names: set[str]) -> dict[str, ResolvedAgent]:
    """The tenant's promoted AgentDefs among `names` (for callers that check names up front)."""
    out: dict[str, ResolvedAgent] = {}
    defs = DefStore(rt.pool)
    for name in sorted(names):
        record = await defs.get(tenant_id, AGENT, name=name)
        if record is not None:
            try:
                out[name] = build_agent(rt, name, AgentConfig.model_validate(record.body))
            except (TreadleError, ValueError) as exc:  # ValueError: a body the schema no longer accepts
                log.warning("AgentDef %s (%s) does not resolve: %s", name, record.def_id, exc)
    return out


def static_hash(rt: Runtime, name: str) -> str:
    cache: dict[str, str] = rt.extras.setdefault("static_agent_hashes", {})
    if name not in cache:
        cache[name] = agent_hash(rt.config.agents[name])
    return cache[name]


def build_agent(rt: Runtime, name: str, cfg: AgentConfig) -> ResolvedAgent:
    """A ResolvedAgent for a definition that is not in treadle.yaml (tools and model route)."""
    probe = rt.config.model_copy(update={"agents": {name: cfg}})
    return resolve_agents(probe, rt.registry, rt.extras.get("providers") or {}, source=f"AgentDef {name}")[name]


class AgentResolver:
    """The engine's hook (`services["agent_resolver"]`): LeasedRun → ResolvedAgent | None."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.defs = DefStore(rt.pool)
        self._cache: OrderedDict[tuple[Any, ...], ResolvedAgent] = OrderedDict()

    async def __call__(self, leased: LeasedRun) -> ResolvedAgent | None:
        pins = leased.skill_def_ids or {}
        if leased.def_id is None and not pins:
            return self.rt.agents.get(leased.agent)
        key = (leased.tenant_id, leased.def_id or f"yaml:{leased.agent}", tuple(sorted(pins.items())))
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        try:
            agent = await self._resolve(leased, pins)
        except (TreadleError, ValueError) as exc:  # ValueError: a body the schema no longer accepts
            log.warning("run %s: cannot resolve agent %r (def %s): %s", leased.run_id, leased.agent,
                        leased.def_id, exc)
            return None
        if agent is not None:
            self._cache[key] = agent
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return agent

    async def _resolve(self, leased: LeasedRun, pins: dict[str, str]) -> ResolvedAgent | None:
        if leased.def_id is not None:
            record = await self.defs.get(leased.tenant_id, AGENT, def_id=leased.def_id)
            if record is None:
                return None
            agent = build_agent(self.rt, leased.agent, AgentConfig.model_validate(record.body))
        else:
            base = self.rt.agents.get(leased.agent)
            if base is None:
                return None
            agent = base
        if not pins:
            return agent
        skills: list[tuple[str, str]] = []
        for name in agent.config.skills:
            pin = pins.get(name)
            if pin is None or pin == MISSING_PIN:
                continue
            if pin == YAML_PIN:
                spec = self.rt.config.skills.get(name)
                if spec is None:
                    log.warning("run %s: yaml skill %r is gone; running without it", leased.run_id, name)
                    continue
                skills.append((name, spec.body))
            else:
                skill = await self.defs.get(leased.tenant_id, SKILL, def_id=pin)
                if skill is None:
                    return None
                skills.append((name, str(skill.body.get("body", ""))))
        prompt = compose_system_prompt(agent.config.system_prompt, skills)
        config = agent.config.model_copy(update={"system_prompt": prompt})
        return dataclasses.replace(agent, config=config)
