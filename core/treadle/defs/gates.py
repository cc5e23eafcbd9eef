"""Who may touch which defs through a *Def tool: one `Gate` protocol, two implementations.

A gate speaks about a def's *subject* — what the kind's `gate_subject(name, body)` hook says a
caller's `*_def_scopes` are about:

- `NameGate` (AgentDef, SkillDef): the subject is the def's name. `self` covers the names the
  calling agent owns (its own name; the skills it lists), `named:<name>` one name, `any` all.
  It also refuses grants that widen what the caller holds itself (`check_grants`).
- `AgentGate` (ScheduleDef, WebhookDef): the subject is the agent the def starts. `self` covers
  the calling agent, `named:<agent>` one agent, `any` all — including defs that start no agent
  (a channel-delivery webhook). `descendants` is accepted by the config but grants nothing
  (treadle keeps no agent lineage), in both gates.

Empty scopes deny everything (default-deny), before any input is looked at. The operator's HTTP
routes pass no gate at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from treadle.errors import DefRefused


class Gate(Protocol):
    """What the lifecycle asks of a caller's scopes (`what` is "<Label>.<op>", for messages)."""

    @property
    def scopes(self) -> tuple[str, ...]: ...

    @property
    def field(self) -> str:
        """The agent config field the scopes come from (e.g. `agent_def_scopes`)."""
        ...

    def allows(self, subject: str | None) -> bool: ...

    def check(self, subject: str | None, what: str) -> None:
        """DefRefused unless the scopes are non-empty and allow `subject`."""
        ...

    def check_grants(
        self, granted: Mapping[str, Any], parent_granted: Mapping[str, Any] | None, what: str
    ) -> None:
        """DefRefused when a def would grant more than the caller (or the def's parent) holds."""
        ...


def require_scopes(gate: Gate, what: str) -> None:
    """Default-deny: DefRefused when the gate's scopes are empty."""
    if not gate.scopes:
        raise DefRefused(f"{what}: denied — the agent's {gate.field} is empty (default-deny)")


#: list fields where an absent value means "not narrowed" (wider than any list), not "none"
UNRESTRICTED_WHEN_ABSENT = frozenset({"allowed_hosts", "channels"})


@dataclass(frozen=True, slots=True)
class NameGate:
    """Scopes over def names; `own` is what `self` covers, `grants` the list fields the caller
    holds itself (a def it writes may carry only those, or what its parent already had)."""

    scopes: tuple[str, ...]
    field: str
    own: frozenset[str] = frozenset()
    #: a field the caller holds: its entries, or None where None means "not narrowed" (allowed_hosts)
    grants: Mapping[str, frozenset[str] | None] = dataclasses.field(default_factory=dict)
    #: what else `self` covers, by rule (SkillDef: the names the agent's `skills:` patterns admit)
    own_match: Callable[[str], bool] | None = None

    def allows(self, subject: str | None) -> bool:
        if "any" in self.scopes:
            return True
        if subject is None:
            return False
        if f"named:{subject}" in self.scopes:
            return True
        return "self" in self.scopes and (subject in self.own or (self.own_match is not None
                                                                 and self.own_match(subject)))

    def check(self, subject: str | None, what: str) -> None:
        require_scopes(self, what)
        if not self.allows(subject):
            raise DefRefused(f"{what}: {subject!r} is outside this agent's {self.field} ({', '.join(self.scopes)})")

    def check_grants(
        self, granted: Mapping[str, Any], parent_granted: Mapping[str, Any] | None, what: str
    ) -> None:
        for key, held in self.grants.items():
            if held is None:  # the caller is not narrowed in this field: anything it writes is narrower
                continue
            if key in UNRESTRICTED_WHEN_ABSENT and granted.get(key) is None:
                if parent_granted is not None and parent_granted.get(key) is None:
                    continue  # the parent already had no narrowing
                raise DefRefused(f"{what}: {key} absent would mean no narrowing, wider than this agent's own "
                                 f"{key} {sorted(held)}")
            inherited = set(parent_granted.get(key) or []) if parent_granted else set()
            extra = sorted(set(granted.get(key) or []) - held - inherited)
            if extra:
                raise DefRefused(f"{what}: {key} {extra} would widen what this agent holds itself (a def written "
                                 f"through a tool may carry only the calling agent's own {key} or its parent's)")


@dataclass(frozen=True, slots=True)
class AgentGate:
    """Scopes over the agent a def starts; `self_agent` is the calling agent."""

    scopes: tuple[str, ...]
    field: str
    self_agent: str

    def allows(self, subject: str | None) -> bool:
        if "any" in self.scopes:
            return True
        if subject is None:
            return False
        return f"named:{subject}" in self.scopes or ("self" in self.scopes and subject == self.self_agent)

    def check(self, subject: str | None, what: str) -> None:
        require_scopes(self, what)
        if not self.allows(subject):
            target = f"agent {subject!r}" if subject else "a def without an agent"
            raise DefRefused(f"{what}: {target} is outside this agent's {self.field} ({', '.join(self.scopes)})")

    def check_grants(
        self, granted: Mapping[str, Any], parent_granted: Mapping[str, Any] | None, what: str
    ) -> None:
        """Trigger defs grant nothing of their own: a run they start gets its agent's grants."""
