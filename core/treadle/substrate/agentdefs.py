"""AgentDef: agents created, forked and promoted at run time, over the treadle.yaml base.

A body is an agent's yaml mapping (`AgentConfig`), normalized: fields left at their defaults are
dropped (so `max_iterations: 16` and no `max_iterations` are the same def) and line endings are
LF. Its `content_sha256` is `"sha256:" + hex(SHA-256(canonical JSON))` over the body minus the
fields that are not the agent's behaviour — `description` and the `*_def_scopes` — with the
system prompt's trailing whitespace trimmed and empty values dropped. A yaml agent, the tool and
POST /v1/_agentdef therefore give one definition one hash. That hash is kept as `treadle_sha256`;
`content_sha256` is loomcycle's (domain/loomhash.py: name and description included, the same
bytes as loomcycle's agents.Sign), which `treadle hash agent NAME` prints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from treadle.config import CODE_JS, AgentConfig
from treadle.defs.args import parse_spec
from treadle.defs.lifecycle import DefLifecycle
from treadle.domain import loomhash
from treadle.domain.channelacl import acl_grants
from treadle.domain.defs import DefRecord, content_sha256, normalize_text
from treadle.engine.agents import AgentCatalogue
from treadle.engine.model_routes import route_errors
from treadle.errors import DefRefused
from treadle.specs.a2a import split_tool_name as split_a2a_tool_name
from treadle.specs.mcp import is_mcp_tool_name
from treadle.specs.volumes import binding_grants
from treadle.store.defs import DefStore

KIND = "agent"
HASH_EXCLUDED = frozenset({"description", "agent_def_scopes", "skill_def_scopes", "schedule_def_scopes",
                           "webhook_def_scopes", "volume_def_scopes", "volumes"})
#: list fields a def written through a tool may carry only as far as the caller (or the parent) does
GRANT_FIELDS = ("tools", "memory_scopes", "agent_def_scopes", "skill_def_scopes", "schedule_def_scopes",
                "webhook_def_scopes", "evaluation_scopes", "allowed_hosts", "volume_def_scopes", "volumes", "channels",
                "memory_consolidation")


def agent_body(cfg: AgentConfig) -> dict[str, Any]:
    """The normalized body of an agent definition."""
    body: dict[str, Any] = cfg.model_dump(mode="json", exclude_defaults=True)
    for explicit in ("provider", "model"):  # an explicit provider changes how `model` is read (alias or not)
        if explicit in cfg.model_fields_set and cfg.tier is None:
            body[explicit] = getattr(cfg, explicit)
    # a top-level field written out with its default value stays in the body (loomcycle hashes what
    # is written: Go's omitempty drops only zero values, so `max_tokens: 4096` counts)
    dumped = cfg.model_dump(mode="json", include=cfg.model_fields_set)
    for key in cfg.model_fields_set - set(body):
        if key in dumped and not loomhash.is_go_zero(dumped[key]):
            body[key] = dumped[key]
    if not any((body.get("channels") or {}).values()):  # loomcycle hashes the block only when a list has entries
        body.pop("channels", None)
    if "system_prompt" in body:
        body["system_prompt"] = body["system_prompt"].replace("\r\n", "\n").replace("\r", "\n")
    return body


def _is_default(key: str, value: Any) -> bool:
    """Whether `value` is AgentConfig's default for `key` (treadle's own hash ignores those)."""
    field = AgentConfig.model_fields.get(key)
    if field is None or key in ("provider", "model"):  # an explicit provider/model is meaningful
        return False
    default = field.get_default(call_default_factory=True)
    dumped = default.model_dump(mode="json") if hasattr(default, "model_dump") else default
    return bool(dumped == value)


def agent_content_sha256(body: dict[str, Any]) -> str:
    fields = {k: v for k, v in body.items() if k not in HASH_EXCLUDED and not _is_default(k, v)}
    if isinstance(fields.get("system_prompt"), str):
        fields["system_prompt"] = normalize_text(fields["system_prompt"])
    return content_sha256(fields)


def agent_hash(cfg: AgentConfig) -> str:
    """treadle's earlier hash (`treadle_sha256`)."""
    return agent_content_sha256(agent_body(cfg))


def agent_loomcycle_sha256(name: str, body: dict[str, Any]) -> str:
    """loomcycle's content_sha256 of agent `name` with this normalized body."""
    return loomhash.agent_sha256(name, body)


def agent_loomcycle_hash(name: str, cfg: AgentConfig) -> str:
    return agent_loomcycle_sha256(name, agent_body(cfg))


class AgentDefFamily(DefLifecycle):
    """Hooks: normalize (AgentConfig + references + known tools), content_hash, granted (the grant
    fields a NameGate compares), the yaml `agents:` base. Gated by name (the default subject).
    Also the runtime's `AgentDirectory` (`current`, `static_names`)."""

    kind = KIND
    label = "AgentDef"
    create_promotes = True
    fork_promotes = False

    def __init__(self, defs: DefStore, catalogue: AgentCatalogue) -> None:
        super().__init__(defs)
        self.catalogue = catalogue

    async def normalize(self, tenant: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        cfg = parse_spec(self.label, AgentConfig, body)
        probe = self.catalogue.config.model_copy(update={"agents": {name: cfg}})
        errs = [f"{path.removeprefix(f'agents.{name}.')}: {msg}"
                for path, msg in probe.reference_errors() or route_errors(probe) if path.startswith(f"agents.{name}.")]
        registry = self.catalogue.registry
        unknown = [t for t in cfg.tools if registry.get(t) is None and not is_mcp_tool_name(t)
                   and not split_a2a_tool_name(t)]
        if unknown:
            errs.append(f"tools: unknown tool(s) {', '.join(unknown)} (known: {', '.join(registry.names())})")
        if errs:
            raise DefRefused("invalid AgentDef: " + "; ".join(errs))
        return agent_body(cfg)

    def content_hash(self, body: dict[str, Any]) -> str:
        return agent_content_sha256(body)

    def named_content_hash(self, name: str, body: dict[str, Any]) -> str:
        return agent_loomcycle_sha256(name, body)

    def treadle_hash(self, body: dict[str, Any]) -> str | None:
        return agent_content_sha256(body)

    def create_refreshes(self, active: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
        """A code agent's create with new code is a new version (loomcycle's create, which the TS
        client's `ensureCodeAgent` relies on to register-if-changed); other agents fork."""
        return active.get("provider") == CODE_JS and body.get("provider") == CODE_JS

    def record_view(self, record: DefRecord) -> dict[str, Any]:
        """The base view; a code agent's also names its code's hash (`code_hash`, sha256 of the
        JavaScript: the `provider.code_hash` of its runs' model spans), so the lineage says which
        code each version ran."""
        out = super().record_view(record)
        code = record.body.get("code")
        if record.body.get("provider") == CODE_JS and isinstance(code, str):
            out["code_hash"] = hashlib.sha256(code.encode()).hexdigest()
        return out

    def static_body(self, name: str) -> dict[str, Any] | None:
        cfg = self.catalogue.config.agents.get(name)
        return agent_body(cfg) if cfg is not None else None

    def static_names(self) -> list[str]:
        return sorted(self.catalogue.config.agents)

    def granted(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        granted: dict[str, Any] = AgentConfig.model_validate(dict(body)).model_dump(mode="json",
                                                                                   include=set(GRANT_FIELDS))
        granted["volumes"] = binding_grants(granted.get("volumes") or [])  # name:mode, comparable
        granted["channels"] = acl_grants(granted.get("channels"))  # publish:<pattern>, comparable
        granted["memory_consolidation"] = ["granted"] if granted.get("memory_consolidation") else []
        return granted
