"""SkillDef: text blocks added to the system prompt of the agents that list them in `skills:`.

A body is `{body, description, tools}` (`SkillSpec`); its hash covers `body` (LF line endings,
trailing whitespace trimmed) and `tools`. treadle.yaml's `skills:` are the static base; a
promoted SkillDef of the same name overrides one for new runs (runs pin the version they start
with, see substrate/resolve.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from treadle.defs.args import parse_spec
from treadle.defs.lifecycle import DefLifecycle
from treadle.domain import loomhash, skillmatch
from treadle.domain.defs import content_sha256, normalize_text
from treadle.domain.substrate import SkillSpec
from treadle.errors import DefRefused
from treadle.store.defs import DefStore

KIND = "skill"


def skill_body(spec: SkillSpec) -> dict[str, Any]:
    body: dict[str, Any] = spec.model_dump(mode="json", exclude_defaults=True)
    body["body"] = spec.body.replace("\r\n", "\n").replace("\r", "\n")
    return body


def skill_content_sha256(body: dict[str, Any]) -> str:
    return content_sha256({"body": normalize_text(str(body.get("body", ""))), "tools": body.get("tools") or []})


def skill_loomcycle_sha256(name: str, body: dict[str, Any]) -> str:
    """loomcycle's content_sha256 of skill `name` with this body."""
    return loomhash.skill_sha256(name, str(body.get("body", "")), str(body.get("description") or ""),
                                 list(body.get("tools") or []))


class SkillDefFamily(DefLifecycle):
    """Hooks: normalize (SkillSpec), content_hash, the yaml `skills:` base. Gated by name (the
    default subject); a skill grants nothing of its own (its `tools` are advice to the agent)."""

    kind = KIND
    label = "SkillDef"
    create_promotes = True
    fork_promotes = False

    def __init__(self, defs: DefStore, static: Mapping[str, SkillSpec]) -> None:
        super().__init__(defs)
        self.static = static

    async def normalize(self, tenant: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return skill_body(parse_spec(self.label, SkillSpec, body))

    def content_hash(self, body: dict[str, Any]) -> str:
        return skill_content_sha256(body)

    def named_content_hash(self, name: str, body: dict[str, Any]) -> str:
        return skill_loomcycle_sha256(name, body)

    def treadle_hash(self, body: dict[str, Any]) -> str | None:
        return skill_content_sha256(body)

    def static_body(self, name: str) -> dict[str, Any] | None:
        spec = self.static.get(name)
        return skill_body(spec) if spec is not None else None

    def static_names(self) -> list[str]:
        return sorted(self.static)

    def name_arg(self, args: Mapping[str, Any]) -> str:
        """Skill names may carry `/` groups (`review/security`, domain/skillmatch.py)."""
        name = args.get("name")
        problem = skillmatch.name_problem(name)
        if problem is not None or not isinstance(name, str):
            raise DefRefused(f"{self.label}: name is required: {problem} (segments of [A-Za-z0-9_-] joined by /)")
        return name
