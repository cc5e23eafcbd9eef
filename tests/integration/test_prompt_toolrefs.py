"""`{{tool:Context.tools|guide|capabilities}}` rendered into the system prompt a model receives
(issue 39 item 4), as loomcycle renders them: the agent's own tools with their side-effect class
and first sentence, their ops and required fields, the deployment's features and limits — the
same bytes on every step (prompt caching)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from treadle.providers.base import ModelRequest, ModelResponse
from treadle.providers.mock import MockProvider
from treadle.store.runs import NewRun
from treadle.testing import open_test_runtime, user_text


class Recording(MockProvider):
    def __init__(self) -> None:
        super().__init__()
        self.systems: list[str] = []

    async def call(self, req: ModelRequest, on_delta: Any = None) -> ModelResponse:
        self.systems.append(req.system)
        return await super().call(req, on_delta)


PROMPT = "You help.\n\n## Tools\n{{tool:Context.tools}}\n\n{{tool:Context.guide}}\n\nEscaped: \\{{tool:Context.tools}}"


async def test_placeholders_render_as_loomcycle_renders_them(db_url: str, tmp_path: Path) -> None:
    model = Recording()
    agents = {
        "helper": {"model": "script", "tools": ["Memory", "Context"], "system_prompt": PROMPT,
                   "mock": {"script": [{"tool": "Context", "input": {"op": "time"}}, {"text": "done"}]}},
        "guided": {"model": "echo", "tools": ["Memory"], "system_prompt": "Be brief.", "inject_tool_guide": True},
    }
    tenant = f"t_refs_{secrets.token_hex(4)}"
    async with open_test_runtime(agents, database_url=db_url, providers={"mock": model}, home=tmp_path) as (rt, d):
        for agent in ("helper", "guided"):
            await rt.start_run(NewRun(tenant_id=tenant, agent=agent, segments=user_text("go")))
            await d.drain()
    first, second, guided = model.systems
    assert first == second  # byte-stable across steps
    assert first.startswith("You help.\n\n## Tools\n<tool-result tool=\"Context\" op=\"tools\">\n")
    assert "These are the tools you can call right now." in first
    assert "\n- Context (pure) — Read-only facts about yourself and the runtime.\n" in first
    assert "\n- Memory (state) — Persistent key/value memory.\n" in first
    assert '<tool-result tool="Context" op="guide">' in first
    assert "- Memory (state): ops set|get|delete|list|incr|merge|search|add|recall|" in first
    assert "; requires op, scope" in first
    assert first.endswith("Escaped: {{tool:Context.tools}}")
    assert guided.startswith("Be brief.\n\n<tool-result tool=\"Context\" op=\"capabilities\">\n")
    assert "What this deployment supports right now" in guided
    assert "\nAvailable: a2a" not in guided and "Not available: " in guided and "code_js" in guided
    assert "Limits: memory_max_value_bytes=65536, memory_scope_quota_bytes=1048576" in guided
    assert guided.index('op="capabilities"') < guided.index('op="guide"')
