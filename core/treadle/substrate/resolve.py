"""Which agent a run runs: pinned at start, resolved at every step.

At start (`AgentPinning.pin`), a run of NAME takes the tenant's promoted AgentDef of NAME if there is one,
else the treadle.yaml agent; the def_id and its content hash are recorded on the run, and every
skill the agent lists is pinned by name (the promoted SkillDef's def_id, or "yaml") — and, when the
agent holds the Skill tool, every skill its `skills:` allowlist admits (loaded on demand). A step
(`AgentPinning.resolve`) rebuilds exactly that agent — defs are immutable, so forking or promoting
later never changes a running run — and appends the skill bodies to its system prompt.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from typing import Any

from treadle.config import AgentConfig
from treadle.domain import skillmatch
from treadle.engine.agents import AgentCatalogue, ResolvedAgent
from treadle.errors import TreadleError, UnknownAgent
from treadle.store.defs import DefStore
from treadle.store.runs import NewRun
from treadle.store.steps import LeasedRun
from treadle.substrate.agentdefs import agent_loomcycle_hash
from treadle.substrate.skilldefs import KIND as SKILL

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


def skills_note(tools: list[str], patterns: list[str]) -> str:
    """loomcycle's run-start note for an agent whose `skills:` whitelists skills on demand."""
    if not skillmatch.uses_skill_tool(tools, patterns):
        return ""
    allow = [e.strip().removeprefix("+") for e in patterns if e.strip() and not e.strip().startswith("-")]
    if not allow:
        return ""
    return ("Skills available on demand (matching: " + ", ".join(allow) + "). Use the `Skill` tool: "
            '`{"op":"list"}` to discover them (optional `pattern`), `{"name":"<skill>"}` to load one into context. '
            'For how skills work, call `Context` `{"op":"help","topic":"skills"}`.')


class AgentPinning:
    """`pin` at a run's start; `resolve` (the engine's agent resolver) at every step."""

    def __init__(self, defs: DefStore, catalogue: AgentCatalogue) -> None:
        self.defs = defs
        self.catalogue = catalogue
        self.config = catalogue.config
        self._static_hashes: dict[str, str] = {}
        self._cache: OrderedDict[tuple[Any, ...], ResolvedAgent] = OrderedDict()

    async def _unknown(self, tenant_id: str, agent: str) -> str:
        """`unknown agent 'x'`, with the closest known name and the known ones (yaml + promoted defs)."""
        known = sorted({*self.catalogue.static, *(r.name for r in await self.defs.list(tenant_id, AGENT) if r.active)})
        import difflib  # only on an unknown agent

        close = difflib.get_close_matches(agent, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listing = ", ".join(known[:50]) + (" …" if len(known) > 50 else "") if known else "none"
        return f"unknown agent {agent!r}{hint} (known: {listing})"

    async def pin(self, new: NewRun) -> None:
        """Fill `new.def_id`, `new.def_content_sha256` and `new.skill_def_ids` (a skill that does not
        exist is pinned as "missing" and left out), or raise UnknownAgent. A caller may preset
        `new.def_id` to run that exact version."""
        defs = self.defs
        cfg: AgentConfig
        if new.def_id is not None:
            record = await defs.get(new.tenant_id, AGENT, def_id=new.def_id)
            if record is None or record.status != "active" or record.name != new.agent:
                raise UnknownAgent(f"AgentDef {new.def_id!r} of agent {new.agent!r} not found (or retired)")
            cfg = AgentConfig.model_validate(record.body)
            new.def_content_sha256 = record.content_sha256
        else:
            record = await defs.get(new.tenant_id, AGENT, name=new.agent)
            static = self.catalogue.get(new.agent)
            if record is not None:
                cfg = AgentConfig.model_validate(record.body)
                new.def_id, new.def_content_sha256 = record.def_id, record.content_sha256
            elif static is not None:
                cfg = static.config
                new.def_content_sha256 = self.static_hash(new.agent)
            else:
                raise UnknownAgent(await self._unknown(new.tenant_id, new.agent))
        pins: dict[str, str] = {}
        if skillmatch.uses_skill_tool(cfg.tools, cfg.skills):  # skills on demand: the versions the run may load
            for name, (def_id, _) in (await defs.active_versions(new.tenant_id, SKILL)).items():
                if skillmatch.allowed(cfg.skills, name):
                    pins[name] = def_id
            for name in self.config.skills:
                if name not in pins and skillmatch.allowed(cfg.skills, name):
                    pins[name] = YAML_PIN
        if cfg.skills:
            for name in skillmatch.literals(cfg.skills):
                if name in pins:
                    continue
                skill = await defs.get(new.tenant_id, SKILL, name=name)
                if skill is not None:
                    pins[name] = skill.def_id
                elif name in self.config.skills:
                    pins[name] = YAML_PIN
                else:  # not created yet (an agent may author its own skills): the run goes without it
                    log.info("run of %r: skill %r is neither in treadle.yaml nor a promoted SkillDef", new.agent,
                             name)
                    pins[name] = MISSING_PIN
        if pins:
            new.skill_def_ids = pins

    async def pinned_agent(self, new: NewRun) -> ResolvedAgent | None:
        """The agent `pin` pinned `new` to, without its skills (for work outside any run: a
        replay's summary); None when it no longer resolves."""
        if new.def_id is None:
            return self.catalogue.get(new.agent)
        record = await self.defs.get(new.tenant_id, AGENT, def_id=new.def_id)
        if record is None:
            return None
        return self.catalogue.build(new.agent, AgentConfig.model_validate(record.body))

    async def promoted(self, tenant_id: str, names: set[str]) -> dict[str, ResolvedAgent]:
        """The tenant's promoted AgentDefs among `names` (for callers that check names up front)."""
        out: dict[str, ResolvedAgent] = {}
        for name in sorted(names):
            record = await self.defs.get(tenant_id, AGENT, name=name)
            if record is not None:
                try:
                    out[name] = self.catalogue.build(name, AgentConfig.model_validate(record.body))
                except (TreadleError, ValueError) as exc:  # ValueError: a body the schema no longer accepts
                    log.warning("AgentDef %s (%s) does not resolve: %s", name, record.def_id, exc)
        return out

    def static_hash(self, name: str) -> str:
        if name not in self._static_hashes:
            self._static_hashes[name] = agent_loomcycle_hash(name, self.config.agents[name])
        return self._static_hashes[name]

    async def resolve(self, leased: LeasedRun) -> ResolvedAgent | None:
        """The agent a step runs: exactly what the run was pinned to (None: it no longer resolves),
        routed through the run's loomcycle `user_tier` when it names one of `tiers:`."""
        agent = await self._pinned(leased)
        tier = leased.run_options.user_tier
        if agent is not None and isinstance(tier, str) and self.config.knows_user_tier(tier):
            try:
                return self.catalogue.retier(agent, tier)
            except TreadleError as exc:  # the user tier allows none of the agent's candidates
                log.warning("run %s: agent %r under user tier %r: %s", leased.run_id, leased.agent, tier, exc)
                return None
        return agent

    async def _pinned(self, leased: LeasedRun) -> ResolvedAgent | None:
        pins = leased.skill_def_ids or {}
        if leased.def_id is None and not pins:
            base = self.catalogue.get(leased.agent)
            if base is None or not skills_note(base.config.tools, base.config.skills):
                return base
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
            agent = self.catalogue.build(leased.agent, AgentConfig.model_validate(record.body))
        else:
            base = self.catalogue.get(leased.agent)
            if base is None:
                return None
            agent = base
        note = skills_note(agent.config.tools, agent.config.skills)
        if not pins and not note:
            return agent
        skills: list[tuple[str, str]] = []
        for name in skillmatch.literals(agent.config.skills):  # bundled; the others load on demand
            pin = pins.get(name)
            if pin is None or pin == MISSING_PIN:
                continue
            if pin == YAML_PIN:
                spec = self.config.skills.get(name)
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
        if note:
            prompt = f"{prompt}\n\n---\n\n{note}" if prompt else note
        config = agent.config.model_copy(update={"system_prompt": prompt})
        return dataclasses.replace(agent, config=config)
