"""The team walk as a Provider: the "model" of a team run (teams/walk.py does the deciding).

The engine does not know a team run from any other: it asks this provider for a turn, records the
turn, runs the tool call (Agent or Interruption, which park), and asks again with the results.
The system prompt carries the pinned team (`TeamSpec`): name, def_id, definition and run options,
so a turn is a pure function of the request — a re-delivered step asks the same question and gets
the same answer, tool_use ids included (they derive from the run id and the call's position).
Usage is zero: the walk spends no tokens and never triggers compaction.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from treadle.domain.content import Block, Message, TextBlock, ToolResultBlock, ToolUseBlock
from treadle.errors import ProviderError
from treadle.providers.base import DeltaSink, ModelRequest, ModelResponse, Usage
from treadle.teams.graph import Definition, parse
from treadle.teams.walk import Walked, walk

PROVIDER = "team"
MODEL = "team-walk"


@dataclass(frozen=True, slots=True)
class TeamSpec:
    """What a team run runs (pinned at its start): the version of the team and its options."""

    name: str
    def_id: str
    definition: dict[str, Any]
    interrupt_on_cap: bool = False

    def to_prompt(self) -> str:
        return json.dumps({"team": self.name, "def_id": self.def_id, "definition": self.definition,
                           "interrupt_on_cap": self.interrupt_on_cap}, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_prompt(cls, text: str) -> TeamSpec:
        """The spec from a system prompt that starts with it (one JSON line: the engine may append
        sections after it, such as the run's metadata)."""
        raw = json.loads(text.split("\n", 1)[0])
        return cls(raw["team"], raw["def_id"], raw["definition"], bool(raw.get("interrupt_on_cap")))


def call_id(run_id: str, index: int) -> str:
    return "toolu_team_" + hashlib.blake2b(f"{run_id}\x1f{index}".encode(), digest_size=12).hexdigest()


def replay(spec: TeamSpec, messages: list[Message]) -> Walked:
    """The walk over a team run's conversation."""
    task = next((m.text() for m in messages if m.role == "user" and m.text()), "")
    results = [(b.is_error, b.content) for m in messages for b in m.content if isinstance(b, ToolResultBlock)]
    definition: Definition = parse(spec.definition)
    return walk(spec.name, spec.def_id, definition, task, results, interrupt_on_cap=spec.interrupt_on_cap)


class TeamWalkProvider:
    name = PROVIDER

    async def call(self, req: ModelRequest, on_delta: DeltaSink | None = None) -> ModelResponse:
        try:
            spec = TeamSpec.from_prompt(req.system)
        except (ValueError, KeyError, TypeError):
            raise ProviderError("team: the run carries no team definition", code="team_spec_missing") from None
        walked = replay(spec, req.messages)
        content: list[Block]
        if walked.call is not None:
            done = sum(1 for m in req.messages for b in m.content if isinstance(b, ToolResultBlock))
            run_id = req.run.run_id if req.run is not None else ""
            content = [TextBlock(walked.call.note),
                       ToolUseBlock(call_id(run_id, done), walked.call.tool, dict(walked.call.input))]
            return ModelResponse(content, "tool_use", Usage(), MODEL, PROVIDER)
        assert walked.answer is not None
        text = json.dumps(walked.answer, ensure_ascii=False, separators=(",", ":"))
        if on_delta is not None:
            await on_delta("text", text)
        return ModelResponse([TextBlock(text)], "end_turn", Usage(), MODEL, PROVIDER)
