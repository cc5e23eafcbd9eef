"""SkillDef: text blocks added to the system prompt of the agents that list them in `skills:`.

A body is `{body, description, tools}` (`SkillSpec`); its hash covers `body` (LF line endings,
trailing whitespace trimmed) and `tools`. treadle.yaml's `skills:` are the static base; a
promoted SkillDef of the same name overrides one for new runs (runs pin the version they start
with, see substrate/resolve.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from treadle.domain.defs import content_sha256, normalize_text
from treadle.domain.substrate import SkillSpec
from treadle.errors import DefRefused
from treadle.specs.schedule import validation_message
from treadle.store.defs import DefStore
from treadle.substrate.family import SubstrateFamily

KIND = "skill"


def skill_body(spec: SkillSpec) -> dict[str, Any]:
    body: dict[str, Any] = spec.model_dump(mode="json", exclude_defaults=True)
    body["body"] = spec.body.replace("\r\n", "\n").replace("\r", "\n")
    return body


def skill_content_sha256(body: dict[str, Any]) -> str:
    return content_sha256({"body": normalize_text(str(body.get("body", ""))), "tools": body.get("tools") or []})


class SkillDefFamily(SubstrateFamily):
    kind = KIND
    label = "SkillDef"
    fork_promotes = False

    def __init__(self, defs: DefStore, static: Mapping[str, SkillSpec]) -> None:
        super().__init__(defs)
        self.static = static

    def validate(self, name: str, overlay: dict[str, Any]) -> dict[str, Any]:
        try:
            spec = SkillSpec.model_validate(overlay)
        except ValidationError as exc:
            raise DefRefused(f"invalid SkillDef: {validation_message(exc)}") from None
        return skill_body(spec)

    def content_hash(self, body: dict[str, Any]) -> str:
        return skill_content_sha256(body)

    def static_body(self, name: str) -> dict[str, Any] | None:
        spec = self.static.get(name)
        return skill_body(spec) if spec is not None else None

    def static_names(self) -> list[str]:
        return sorted(self.static)
